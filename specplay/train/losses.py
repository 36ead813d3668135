"""Training objectives. Each takes the model first, as `nn.value_and_grad` wants."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def next_token_loss(model: nn.Module, tokens: mx.array) -> mx.array:
    """Cross-entropy of each next token: pre-training on text."""
    logits = model(tokens[:, :-1])
    return nn.losses.cross_entropy(logits, tokens[:, 1:], reduction="mean")


# Forward KL(p_target || p_draft) per position, averaged over the positions `mask` keeps
# (DistillSpec): the drafter is pushed to put mass wherever the target does, which is what the
# acceptance rule sum_x min(p_target(x), p_draft(x)) rewards.
def forward_kl(logp_target: mx.array, draft_logits: mx.array, mask: mx.array) -> mx.array:
    logp_draft = nn.log_softmax(draft_logits.astype(mx.float32), axis=-1)
    kl = (mx.exp(logp_target) * (logp_target - logp_draft)).sum(axis=-1)
    return (kl * mask).sum() / mx.maximum(mask.sum(), 1)


def forward_kl_loss(draft: nn.Module, inputs: mx.array, logp_target: mx.array, mask: mx.array) -> mx.array:
    return forward_kl(logp_target, draft(inputs), mask)


def target_log_probs(target: nn.Module, inputs: mx.array) -> mx.array:
    """The frozen target's log-distribution at every position: the distillation label."""
    return mx.stop_gradient(nn.log_softmax(target(inputs).astype(mx.float32), axis=-1))


# The same forward KL when the target is known on its top K tokens and as one lump elsewhere
# (train/teacher.py): it is exact for the distributions over {top K tokens, the rest}, and a lower
# bound of the full KL that meets it as the lump's mass goes to 0.
def sparse_forward_kl(
    draft_logits: mx.array, top_ids: mx.array, top_logp: mx.array, rest_logp: mx.array, mask: mx.array
) -> mx.array:
    logp_draft = nn.log_softmax(draft_logits.astype(mx.float32), axis=-1)
    draft_top = mx.take_along_axis(logp_draft, top_ids, axis=-1)
    draft_rest = mx.log(mx.maximum(1.0 - mx.exp(draft_top).sum(axis=-1), 1e-12))
    top_logp = top_logp.astype(mx.float32)
    kl = (mx.exp(top_logp) * (top_logp - draft_top)).sum(axis=-1)
    kl = kl + mx.exp(rest_logp) * (rest_logp - draft_rest)
    return (kl * mask).sum() / mx.maximum(mask.sum(), 1)
