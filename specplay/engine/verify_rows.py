"""A verified round's numbers from both models' full distributions, as arrays, for any backend.

Given the target's rows at the k drafted positions and the bonus position, the drafted tokens and
the drafter's rows, this computes everything `VerifiedDraft` carries: p_target(x) and p_draft(x),
d = TV, the target's argmax, a residual draw at each position and the bonus draw after them, the
rule's TV and statistics where it reads rows, each correction's rank among the drafter's tokens
(width.py), and optionally each row's most likely tokens.
`xp` is numpy or mlx.core: the MLX backend runs it on the device (compiled where that pays), a
backend computing on the host runs it in numpy. The judging itself stays in the engine.
"""

from __future__ import annotations

from typing import Any

from specplay.engine.accept import Array, inverse_cdf_sample, residual_distribution, tv_distance
from specplay.engine.correction_rank import LOGITS, correction_ranks
from specplay.engine.rules import AcceptanceRule

Arrays = dict[str, Any]


def reads_rows(rule: AcceptanceRule) -> bool:
    """Whether verification computes anything of `rule`: a lossless rule spends nothing, and a
    rule judged from d alone (mentored decoding) has its TV computed by the engine from d."""
    return rule.full_distributions and not rule.lossless


def rule_statistics(rule: AcceptanceRule, p_target: Array, p_draft: Array, xp: Any) -> Arrays:
    """What `rule` reads at each position beyond p_target(x), p_draft(x) and d (reported apart), by name."""
    return {name: value[..., 0] for name, value in rule.statistics(p_target, p_draft, xp).items() if name != "tv"}


def top_n(probs: Array, n: int, xp: Any) -> tuple[Array, Array]:
    """Each row's n most likely token ids and their probabilities, in no particular order."""
    ids = xp.argpartition(-probs, n - 1, axis=-1)[:, :n]
    return ids, xp.take_along_axis(probs, ids, axis=-1)


def verify_rows(
    p_target: Array,
    drafted: Array,
    p_draft: Array,
    uniforms: Array,
    *,
    rule: AcceptanceRule,
    n: int,
    xp: Any,
    logits: Array | None = None,
) -> Arrays:
    """p_target [k + 1, vocab] (sampling applied), drafted [k], p_draft [k, vocab], uniforms [k + 1]
    (the round's residual draws, then its bonus draw) -> the arrays a round reads, by name. k > 0.
    Corrections are ranked in p_draft (width.py), or where given in `logits` [k, vocab], the
    drafter's own, for p_draft one-hot (temperature 0)."""
    k = drafted.shape[0]
    head, x = p_target[:k], drafted[:, None]
    corrections = inverse_cdf_sample(residual_distribution(head, p_draft, xp), uniforms[:k], xp)
    out = {
        "drafted": drafted,
        "p_target_x": xp.take_along_axis(head, x, axis=-1)[:, 0],
        "p_draft_x": xp.take_along_axis(p_draft, x, axis=-1)[:, 0],
        "tv": tv_distance(head, p_draft),
        "argmax": xp.argmax(head, axis=-1),
        "corrections": corrections,
        "correction_rank": (
            correction_ranks(p_draft, corrections, xp)
            if logits is None
            else correction_ranks(logits, corrections, xp, floor=LOGITS)
        ),
        "bonus": inverse_cdf_sample(p_target[k:], uniforms[k:], xp),
    }
    if reads_rows(rule):
        out["tv_spent"] = rule.tv_spent(head, p_draft, xp)
        out["rule_stats"] = rule_statistics(rule, head, p_draft, xp)
    if n:
        out["top_target_ids"], out["top_target_p"] = top_n(p_target, n, xp)
        out["top_draft_ids"], out["top_draft_p"] = top_n(p_draft, n, xp)
    return out
