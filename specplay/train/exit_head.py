"""Train an early-exit head: a small adapter on layer L's output that makes the target's first L
layers, read out through its own norm and head, draft more like the whole target.

The target stays frozen. One forward of the target per batch gives both layer L's hidden states
(the head's input) and the target's next-token distribution at every position (the label); the
head learns to minimise forward KL(p_target || p_exit), as `specplay distill` trains drafters.
`distill_exit_head` runs the same pipeline as `distill` (the target's own rollouts of the user's
prompts, resumable from `out/work`) and writes a folder that `--draft early-exit:layers=L,head=OUT` loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from specplay.backends.mlx.early_exit import (
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    ExitHead,
    LayerSplit,
    check_layers,
    save_exit_head,
)
from specplay.files.outputs import OUT_FIX, claim_outputs, refuse_link
from specplay.train.distill import load_or_make_rollouts, rollout_windows
from specplay.train.losses import forward_kl, sparse_forward_kl
from specplay.train.rollouts import RolloutConfig
from specplay.train.saving import saving
from specplay.train.teacher import load_or_build_teacher, step_indices, weights_fingerprint
from specplay.train.trainer import LossFn, Progress, TrainConfig, train

CHECKPOINT = "exit-head-checkpoint"


@dataclass(frozen=True)
class ExitHeadConfig:
    layers: int
    """The exit layer L: the head reads layer L's output (1 to the target's layers - 1)."""
    train: TrainConfig
    mlp_size: int = 0
    """0: a residual linear map (hidden x hidden); otherwise a residual MLP this wide."""
    rollouts: RolloutConfig = field(default_factory=RolloutConfig)
    """distill_exit_head: how the target continues the prompts."""


@dataclass(frozen=True)
class ExitHeadResult:
    steps: int
    held_out_kl_before: float
    """KL(p_target || p_exit) per position of the plain early exit (no head)."""
    held_out_kl_after: float
    trained_tokens: int


def exit_inputs(split: LayerSplit, layers: int, inputs: mx.array) -> tuple[mx.array, mx.array]:
    """Layer `layers`'s hidden states and the target's log-distribution, from one frozen forward."""
    hidden = split.run(split.embed(inputs), 0, layers)
    logits = split.logits(split.run(hidden, layers, len(split.layers)))
    return mx.stop_gradient(hidden), mx.stop_gradient(nn.log_softmax(logits.astype(mx.float32), axis=-1))


def exit_head_loss(split: LayerSplit) -> LossFn:
    """loss(head, hidden, logp_target, mask): forward KL through the target's own norm and head."""

    def loss(head: ExitHead, hidden: mx.array, logp_target: mx.array, mask: mx.array) -> mx.array:
        return forward_kl(logp_target, split.logits(head(hidden)), mask)

    return loss


def held_out_kl(split: LayerSplit, layers: int, head: ExitHead, windows: np.ndarray) -> float:
    """Mean forward KL per position over fixed windows: the yardstick before and after."""
    loss = exit_head_loss(split)
    total = 0.0
    for row in windows:
        inputs = mx.array(row[None, :-1])
        hidden, logp_target = exit_inputs(split, layers, inputs)
        total += loss(head, hidden, logp_target, mx.ones(inputs.shape)).item()
    return total / max(len(windows), 1)


def train_exit_head(
    target: nn.Module,
    windows: np.ndarray,
    held_out: np.ndarray,
    out: Path,
    config: ExitHeadConfig,
    target_identity: Mapping[str, str] | None = None,
    on_progress: Callable[[Progress], None] = lambda _: None,
    on_status: Callable[[str], None] = lambda _: None,
    checkpoint_dir: Path | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> ExitHeadResult:
    """Train a head for `target` (an mlx-lm llama-family model, frozen) on token `windows`, and
    write it to `out`. `target_identity` (the target folder's `folder_identity`) is recorded so
    the head is refused on other weights; `held_out` windows measure the KL before and after."""
    split = LayerSplit(target, "the target")
    check_layers(config.layers, split, "exit head")
    claim_outputs(out, [HEAD_WEIGHTS, HEAD_CONFIG], OUT_FIX)
    head = ExitHead(split.hidden_size, config.mlp_size)
    mx.eval(head.parameters())
    kl_before = held_out_kl(split, config.layers, head, held_out)
    on_status(f"held-out KL(target || exit after layer {config.layers}) without a head: {kl_before:.4f}")

    def forward(inputs: mx.array) -> tuple[mx.array, mx.array]:
        """The target's logits and layer L's output: one frozen pass."""
        hidden = split.run(split.embed(inputs), 0, config.layers)
        return split.logits(split.run(hidden, config.layers, len(split.layers))), hidden

    work = checkpoint_dir.parent if checkpoint_dir is not None else out / "work"
    refuse_link(work, OUT_FIX)  # rollouts and checkpoints stay inside --out
    key = f"exit-{config.layers}/{weights_fingerprint(target)}"
    teacher = load_or_build_teacher(work, forward, windows, key, on_status=on_status)

    def batch(step: int) -> tuple[mx.array, ...]:
        hidden, *answers = teacher.batch(step_indices(config.train.seed, step, len(teacher), config.train.batch_size))
        return hidden.astype(mx.float32), *answers, mx.ones(hidden.shape[:2])

    def loss(model: ExitHead, hidden: mx.array, *answers: mx.array) -> mx.array:
        return sparse_forward_kl(split.logits(model(hidden)), *answers)

    meta = {"exit_head": {k: v for k, v in asdict(config).items() if k != "train"}}
    train(head, loss, batch, config.train, on_progress, checkpoint_dir=checkpoint_dir, meta=meta)
    kl_after = held_out_kl(split, config.layers, head, held_out)
    on_status(f"held-out KL(target || exit after layer {config.layers}) with the head: {kl_after:.4f}")

    trained_tokens = config.train.steps * config.train.batch_size * config.train.seq_len
    result = ExitHeadResult(config.train.steps, kl_before, kl_after, trained_tokens)
    record = {
        "target": dict(target_identity or {}),
        "result": asdict(result),
        "config": asdict(config),
        "provenance": dict(provenance or {}),
    }
    with saving("the trained exit head", out):  # its own temporary files are removed as it fails
        save_exit_head(out, head, config.layers, record)
    return result


def distill_exit_head(
    target: nn.Module,
    prompts: list[list[int]],
    eos_token_id: int,
    out: Path,
    config: ExitHeadConfig,
    target_identity: Mapping[str, str] | None = None,
    on_progress: Callable[[Progress], None] = lambda _: None,
    on_status: Callable[[str], None] = lambda _: None,
    provenance: Mapping[str, Any] | None = None,
) -> ExitHeadResult:
    """`specplay distill`'s pipeline for an exit head: the target continues every prompt, then the
    head learns the target's distributions over that text. Rollouts and checkpoints live in
    `out/work`, so the same call again resumes."""
    work = out / "work"
    seed = config.train.seed
    sequences = load_or_make_rollouts(
        work,
        target,
        prompts=prompts,
        config=config.rollouts,
        seed=seed,
        eos_token_id=eos_token_id,
        on_status=on_status,
    )
    windows, held_out = rollout_windows(sequences, eos_token_id, config.train)
    record = {"prompts": len(prompts), **dict(provenance or {})}
    return train_exit_head(
        target,
        windows,
        held_out=held_out,
        out=out,
        config=config,
        target_identity=target_identity,
        on_progress=on_progress,
        on_status=on_status,
        checkpoint_dir=work / CHECKPOINT,
        provenance=record,
    )
