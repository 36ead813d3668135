"""One training loop for pre-training and distillation: AdamW with warmup and cosine decay,
progress reports, and checkpoints that an interrupted run resumes from."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_unflatten

from specplay.errors import SpecplayError
from specplay.files.json_text import dump_json, read_json
from specplay.train.saving import DISK_FIX, saving

CHECKPOINT_WEIGHTS = "weights.safetensors"
CHECKPOINT_OPTIMIZER = "optimizer.safetensors"
CHECKPOINT_STATE = "state.json"


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int = 8
    seq_len: int = 128
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    seed: int = 0
    checkpoint_every: int = 50


@dataclass(frozen=True)
class Progress:
    step: int
    steps: int
    loss: float | None
    """None (and so the rates) in a resumed run's first report, before it has run a step."""
    tokens_per_s: float | None
    eta_s: float | None


LossFn = Callable[..., mx.array]
"""loss(model, *batch_arrays) -> scalar."""
BatchFn = Callable[[int], tuple[mx.array, ...]]
"""batch(step) -> the arrays the loss takes after the model."""


def make_optimizer(config: TrainConfig) -> optim.Optimizer:
    warmup = max(1, min(config.warmup_steps, config.steps - 1))
    schedule = optim.join_schedules(
        [
            optim.linear_schedule(config.learning_rate * 0.01, config.learning_rate, warmup),
            optim.cosine_decay(config.learning_rate, max(config.steps - warmup, 1), config.learning_rate * 0.05),
        ],
        [warmup],
    )
    return optim.AdamW(learning_rate=schedule, weight_decay=config.weight_decay)


CHECKPOINT_FILES = (CHECKPOINT_WEIGHTS, CHECKPOINT_OPTIMIZER, CHECKPOINT_STATE)
CHECKPOINT_FIX = "remove that folder to start training over, or choose another --out"


def save_checkpoint(directory: Path, model: nn.Module, optimizer: optim.Optimizer, step: int, meta: dict) -> None:
    """Written to `directory`.tmp and renamed into place, the previous one set aside as
    `directory`.old until then, so a kill at any point leaves a state `recover_checkpoint` resumes
    from. A full disk leaves nothing half-written and is one line."""
    recover_checkpoint(directory)
    tmp, old = _beside(directory, ".tmp"), _beside(directory, ".old")
    with saving("the training checkpoint", directory, fix=f"{DISK_FIX} (any earlier checkpoint is kept)"):
        _write_checkpoint(tmp, model, optimizer, step, meta)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    _remove_checkpoint(old)


def _write_checkpoint(tmp: Path, model: nn.Module, optimizer: optim.Optimizer, step: int, meta: dict) -> None:
    try:
        tmp.mkdir(parents=True)
        mx.save_safetensors(str(tmp / CHECKPOINT_WEIGHTS), dict(tree_flatten(model.trainable_parameters())))
        mx.save_safetensors(str(tmp / CHECKPOINT_OPTIMIZER), dict(tree_flatten(optimizer.state)))
        (tmp / CHECKPOINT_STATE).write_text(dump_json({"step": step, **meta}, indent=2))
    except (OSError, RuntimeError):
        _remove_checkpoint(tmp)
        raise


def recover_checkpoint(directory: Path) -> None:
    """Put right whatever a kill inside `save_checkpoint` left: a complete checkpoint wins, a
    half-written `.tmp` is removed, and a set-aside `.old` is restored when it is all there is.
    Only specplay's own checkpoint files are ever removed, and links are refused, never followed."""
    tmp, old = _beside(directory, ".tmp"), _beside(directory, ".old")
    for path in (directory, tmp, old):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise SpecplayError(f"{path} is not a checkpoint folder specplay made; {CHECKPOINT_FIX}")
    _remove_checkpoint(tmp)
    if old.exists():
        if _complete(directory):
            _remove_checkpoint(old)
        else:
            _remove_checkpoint(directory)
            old.rename(directory)


def _beside(directory: Path, suffix: str) -> Path:
    return directory.with_name(directory.name + suffix)


def _complete(directory: Path) -> bool:
    return directory.is_dir() and all((directory / name).is_file() for name in CHECKPOINT_FILES)


def _remove_checkpoint(directory: Path) -> None:
    """Remove a checkpoint folder specplay wrote: its own files only (a half-written one may lack
    some); anything else in it, or a link, is refused rather than deleted."""
    if not os.path.lexists(directory):
        return
    if directory.is_symlink() or not directory.is_dir():
        raise SpecplayError(f"{directory} is not a checkpoint folder specplay made; {CHECKPOINT_FIX}")
    children = list(directory.iterdir())
    foreign = sorted(c.name for c in children if c.name not in CHECKPOINT_FILES or c.is_symlink() or not c.is_file())
    if foreign:
        raise SpecplayError(f"{directory} holds {', '.join(foreign)}, which specplay did not write; {CHECKPOINT_FIX}")
    for child in children:
        child.unlink()
    directory.rmdir()


def load_checkpoint(directory: Path, model: nn.Module, optimizer: optim.Optimizer) -> tuple[int, dict]:
    model.load_weights(list(mx.load(str(directory / CHECKPOINT_WEIGHTS)).items()), strict=False)
    optimizer.state = tree_unflatten(list(mx.load(str(directory / CHECKPOINT_OPTIMIZER)).items()))
    state = read_json(directory / CHECKPOINT_STATE, "checkpoint state")
    return int(state.pop("step")), state


def train(
    model: nn.Module,
    loss_fn: LossFn,
    batch: BatchFn,
    config: TrainConfig,
    on_progress: Callable[[Progress], None] = lambda _: None,
    checkpoint_dir: Path | None = None,
    meta: dict[str, Any] | None = None,
) -> list[float]:
    """Train `model`'s trainable parameters; returns the loss of every step run now.

    With `checkpoint_dir`, a checkpoint is written every `checkpoint_every` steps and at the end,
    and a run finding one there continues from its step (`meta` must match, so a resumed run
    cannot silently mix two configurations).
    """
    meta = {"config": asdict(config), **(meta or {})}
    optimizer = make_optimizer(config)
    optimizer.init(model.trainable_parameters())
    first_step = 0
    if checkpoint_dir is not None:
        recover_checkpoint(checkpoint_dir)
    if checkpoint_dir is not None and (checkpoint_dir / CHECKPOINT_STATE).is_file():
        first_step, saved_meta = load_checkpoint(checkpoint_dir, model, optimizer)
        if json.loads(json.dumps(meta)) != saved_meta:
            saved_steps = (saved_meta.get("config") or {}).get("steps")
            if isinstance(saved_steps, int) and first_step >= saved_steps:  # nothing of it is left to run
                raise ValueError(
                    f"{checkpoint_dir} is of a finished run with other settings; "
                    "train into another --out, or remove that folder to train there again"
                )
            raise ValueError(
                f"the checkpoint in {checkpoint_dir} was made with other settings; "
                "pass the same settings to resume, or remove the folder to start over"
            )
        # Where the resumed run stands, before its first step (which may never come: all were done).
        on_progress(Progress(step=first_step, steps=config.steps, loss=None, tokens_per_s=None, eta_s=None))

    value_and_grad = nn.value_and_grad(model, loss_fn)

    def step_fn(*arrays: mx.array) -> mx.array:
        loss, grads = value_and_grad(model, *arrays)
        optimizer.update(model, grads)
        return loss

    losses: list[float] = []
    started = time.perf_counter()
    for step in range(first_step, config.steps):
        # References to the last evaluated weights and optimizer state (arrays are immutable), so
        # an interruption anywhere in a step still saves exactly `step` finished steps.
        finished = (model.trainable_parameters(), tree_map(lambda x: x, optimizer.state))
        try:
            loss = step_fn(*batch(step))
            mx.eval(loss, model.state, optimizer.state)
            losses.append(loss.item())
            if not math.isfinite(losses[-1]):
                raise _diverged(step + 1, config, f"the loss is {losses[-1]}")
            _report(on_progress, config, done=step + 1, first_step=first_step, losses=losses, started=started)
            if checkpoint_dir is not None and ((step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps):
                _check_finite(model, step + 1, config)  # a checkpoint of broken weights would be resumed
                save_checkpoint(checkpoint_dir, model, optimizer, step + 1, meta)
        except KeyboardInterrupt:
            if checkpoint_dir is not None and step > first_step:
                model.update(finished[0])
                optimizer.state = finished[1]
                save_checkpoint(checkpoint_dir, model, optimizer, step, meta)
            raise
    _check_finite(model, config.steps, config)
    return losses


def _check_finite(model: nn.Module, step: int, config: TrainConfig) -> None:
    broken = [name for name, value in tree_flatten(model.trainable_parameters()) if not mx.isfinite(value).all().item()]
    if broken:
        raise _diverged(step, config, f"{len(broken)} weight tensors hold NaN or infinity")


def _diverged(step: int, config: TrainConfig, what: str) -> SpecplayError:
    """Training that blew up stops here: no model is written from it."""
    return SpecplayError(
        f"training diverged at step {step} of {config.steps} ({what}); no model was written: "
        f"lower the learning rate (--lr, now {config.learning_rate:g}) and run again"
    )


def _report(
    on_progress: Callable[[Progress], None],
    config: TrainConfig,
    done: int,
    first_step: int,
    losses: list[float],
    started: float,
) -> None:
    elapsed_s = time.perf_counter() - started
    steps_run = done - first_step
    on_progress(
        Progress(
            step=done,
            steps=config.steps,
            loss=float(np.mean(losses[-10:])),
            tokens_per_s=steps_run * config.batch_size * config.seq_len / elapsed_s,
            eta_s=elapsed_s / steps_run * (config.steps - done),
        )
    )
