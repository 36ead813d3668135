"""DistillSpec: train a drafter on the target's distributions over the user's prompts.

1. The target continues every prompt (sampled, batched): its own text, as it will be drafted for.
2. The drafter learns to match the target's next-token distribution at every position of that
   text (forward KL), optionally tuning only its last layers.

Everything a run needs to resume sits in `out/work`: the rollouts, the target's answers over them
and the latest checkpoint.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from specplay.errors import SpecplayError
from specplay.files.json_text import dump_json
from specplay.files.outputs import OUT_FIX, claim_outputs, refuse_link, write_in_folder
from specplay.train.data import Windows, token_stream
from specplay.train.losses import forward_kl_loss, sparse_forward_kl, target_log_probs
from specplay.train.models import folder_files, save_folder
from specplay.train.rollouts import RolloutConfig, rollouts
from specplay.train.saving import saving
from specplay.train.teacher import fixed_windows, load_or_build_teacher, step_indices, weights_fingerprint
from specplay.train.trainer import Progress, TrainConfig, train

PROVENANCE_FILE = "distill.json"
HELD_OUT_SHARE = 0.1


@dataclass(frozen=True)
class DistillConfig:
    train: TrainConfig
    rollouts: RolloutConfig = field(default_factory=RolloutConfig)
    last_layers: int | None = None
    """Tune only the last N transformer layers (plus the final norm and output head)."""
    storage: str = "float32"
    keep_worse: bool = False
    """Write the drafter even where training left its held-out KL above where it started."""


@dataclass(frozen=True)
class DistillResult:
    steps: int
    held_out_kl_before: float
    held_out_kl_after: float
    trained_tokens: int

    @property
    def worse(self) -> bool:
        """Training left the drafter further from the target on held-out text."""
        return self.held_out_kl_after > self.held_out_kl_before


def freeze_all_but_last(model: nn.Module, last_layers: int) -> None:
    layers = model.layers
    if not 1 <= last_layers <= len(layers):
        raise ValueError(f"last_layers must be between 1 and {len(layers)} (the drafter's layers)")
    model.freeze()
    for layer in layers[-last_layers:]:
        layer.unfreeze()
    inner = model.model if hasattr(model, "model") else model
    if hasattr(inner, "norm"):
        inner.norm.unfreeze()
    if hasattr(model, "lm_head"):
        model.lm_head.unfreeze()


def rollouts_path(work: Path, target: nn.Module, prompts: list[list[int]], config: RolloutConfig, seed: int) -> Path:
    """The rollouts of this target, these prompts and these sampling settings: another of any of
    them (the same --out reused) makes new ones rather than training on stale text."""
    settings = [config.tokens, config.temperature, config.max_prompt_tokens, seed]
    digest = hashlib.sha256(weights_fingerprint(target).encode() + json.dumps([settings, prompts]).encode())
    return work / f"rollouts-{digest.hexdigest()[:16]}.npz"


def load_or_make_rollouts(
    work: Path,
    target: nn.Module,
    prompts: list[list[int]],
    config: RolloutConfig,
    seed: int,
    eos_token_id: int,
    on_status: Callable[[str], None],
) -> list[list[int]]:
    path = rollouts_path(work, target, prompts, config, seed)
    if path.is_file():
        with np.load(path) as saved:
            tokens, offsets = saved["tokens"], saved["offsets"]
        on_status(f"reusing {len(offsets) - 1} rollouts from {path}")
        return [tokens[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    clipped = [p[-config.max_prompt_tokens :] for p in prompts]
    sequences = rollouts(
        target,
        clipped,
        config.tokens,
        config.temperature,
        eos_token_id,
        seed=seed,
        on_batch=lambda done, total: on_status(f"target rollouts: {done}/{total} prompts"),
    )
    offsets = np.cumsum([0, *(len(s) for s in sequences)])
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / f".{path.stem}.{os.getpid()}.tmp.npz"
    with saving("the target's rollouts", work, [tmp]):
        np.savez(tmp, tokens=np.concatenate([np.asarray(s, dtype=np.int32) for s in sequences]), offsets=offsets)
        os.replace(tmp, path)  # a killed run leaves no half file that a later one would trust
    return sequences


def rollout_windows(
    sequences: list[list[int]], eos_token_id: int, train_config: TrainConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Fixed training windows over most rollouts (the teacher answers each once), and 8 fixed
    held-out windows over the rest."""
    held_out_count = max(1, int(len(sequences) * HELD_OUT_SHARE)) if len(sequences) > 1 else 0
    seq_len = train_config.seq_len
    train_windows = fixed_windows(sequences[held_out_count:], eos_token_id, seq_len)
    held_stream = token_stream(sequences[:held_out_count] or sequences, eos_token_id)
    held_len = min(seq_len, len(held_stream) - 2)
    return train_windows, Windows([held_stream], [1.0], held_len, seed=train_config.seed + 1).batch(0, 8)


def mean_kl(draft: nn.Module, target: nn.Module, windows: np.ndarray) -> float:
    """Forward KL per position over fixed windows: the held-out yardstick before and after."""
    total = 0.0
    for row in windows:
        inputs = mx.array(row[None, :-1])
        loss = forward_kl_loss(draft, inputs, target_log_probs(target, inputs), mx.ones(inputs.shape))
        total += loss.item()
    return total / max(len(windows), 1)


def distill(
    target: nn.Module,
    draft: nn.Module,
    draft_config: dict,
    tokenizer_dir: Path,
    prompts: list[list[int]],
    eos_token_id: int,
    out: Path,
    config: DistillConfig,
    on_progress: Callable[[Progress], None] = lambda _: None,
    on_status: Callable[[str], None] = lambda _: None,
    provenance: dict | None = None,
) -> DistillResult:
    claim_outputs(out, [*folder_files(tokenizer_dir), PROVENANCE_FILE], OUT_FIX)
    work = out / "work"
    refuse_link(work, OUT_FIX)  # rollouts and checkpoints stay inside --out
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
    windows, held_windows = rollout_windows(sequences, eos_token_id, config.train)
    seq_len = config.train.seq_len

    key = f"drafter/{weights_fingerprint(target)}"
    teacher = load_or_build_teacher(work, lambda inputs: (target(inputs), None), windows, key, on_status=on_status)
    if config.last_layers:
        freeze_all_but_last(draft, config.last_layers)
    kl_before = mean_kl(draft, target, held_windows)
    on_status(f"held-out KL(target || draft) before: {kl_before:.4f}")

    def batch(step: int) -> tuple[mx.array, ...]:
        inputs, *answers = teacher.batch(step_indices(config.train.seed, step, len(teacher), config.train.batch_size))
        return inputs, *answers, mx.ones(inputs.shape)

    def loss(model: nn.Module, inputs: mx.array, *answers: mx.array) -> mx.array:
        return sparse_forward_kl(model(inputs), *answers)

    meta = {"distill": {k: v for k, v in asdict(config).items() if k != "train"}}
    train(draft, loss, batch, config.train, on_progress, checkpoint_dir=work / "checkpoint", meta=meta)
    draft.unfreeze()
    kl_after = mean_kl(draft, target, held_windows)
    on_status(f"held-out KL(target || draft) after: {kl_after:.4f}")
    if kl_after > kl_before and not config.keep_worse:
        # The drafter started from is the better one: nothing replaces it (the work folder stays).
        raise SpecplayError(
            f"training made the drafter worse on held-out text (KL(target || draft) {kl_before:.4f} -> "
            f"{kl_after:.4f}), so nothing was written to {out}; the drafter you started from is the better one. "
            "Train on more prompts or with a lower --lr, or give --keep-worse to write it anyway"
        )

    trained_tokens = config.train.steps * config.train.batch_size * seq_len
    result = DistillResult(config.train.steps, kl_before, kl_after, trained_tokens)
    # Checked again: training is long, and a link made meanwhile would carry the model's write out.
    claim_outputs(out, [*folder_files(tokenizer_dir), PROVENANCE_FILE], OUT_FIX)
    # A model cut short is removed whole: the files are specplay's (claimed above), and half a
    # model.safetensors would load as garbage or not at all.
    with saving("the trained drafter", out, [out / name for name in folder_files(tokenizer_dir)]):
        save_folder(out, draft, draft_config, tokenizer_dir, storage=config.storage)
    record = {"result": asdict(result), "config": asdict(config), "prompts": len(prompts), **(provenance or {})}
    write_in_folder(out, PROVENANCE_FILE, dump_json(record, indent=2) + "\n", OUT_FIX)
    return result
