"""`specplay distill`'s job, typed: which drafter to train (an existing one tuned, a new one of a
given shape, or an exit head for the target's first layers), on which prompts, how; and the run
that loads the target, encodes the prompts as `run` does and trains."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specplay.errors import ConfigError, SpecplayError
from specplay.train.rollouts import RolloutConfig
from specplay.train.trainer import TrainConfig

OnStatus = Callable[[str], None]
OnProgress = Callable[[Any], None]
"""Called with each training step's progress (step, loss, tokens/s)."""


@dataclass(frozen=True)
class Shape:
    """What `--new-drafter` or `--exit-head` asks for."""

    layers: int
    width: int = 0
    heads: int = 0
    mlp: int = 0


@dataclass(frozen=True)
class DistillJob:
    target: str
    """The target as the user named it (messages, provenance)."""
    target_model: str
    """Where it loads from (a folder, a Hugging Face id, a GGUF file's converted folder)."""
    start: Literal["draft", "new-drafter", "exit-head"]
    data: Path
    out: Path
    train: TrainConfig
    rollouts: RolloutConfig
    raw: bool = False
    """Prompts as written, without the target's chat template."""
    draft: str | None = None
    """start "draft": the drafter to tune."""
    shape: Shape | None = None
    """start "new-drafter" or "exit-head": its shape."""
    shape_text: str | None = None
    """The shape as the user wrote it (provenance)."""
    last_layers: int | None = None
    storage: Literal["float32", "float16"] = "float32"
    keep_worse: bool = False
    """Write a drafter whose held-out KL training made worse (else nothing is written)."""


@dataclass(frozen=True)
class Loaded:
    """What every kind of distillation starts from."""

    target: Any
    """The target as loaded (its folder, tokenizer, identity)."""
    target_model: Any
    """Its model in fp32, frozen."""
    prompts: list[list[int]]
    eos: int


def load(job: DistillJob) -> Loaded:
    """The target and the prompts, encoded as `run` encodes them."""
    from specplay.backends.mlx.loading import encode_prompt, load_model, upcast_for_cpu
    from specplay.train.prompts import read_prompts

    prompts = read_prompts(job.data)
    target = load_model("target", job.target_model)
    eos = target.tokenizer.eos_token_id
    if eos is None:
        raise SpecplayError(f"target {job.target!r} has no end-of-sequence token; its tokenizer config must name one")
    token_ids = [encode_prompt(target.tokenizer, p.text, job.raw, p.earlier) for p in prompts]
    return Loaded(target, upcast_for_cpu(target.model), token_ids, eos)


def run_job(job: DistillJob, on_progress: OnProgress, on_status: OnStatus) -> str:
    """Train what `job` asks for; the closing line (what was written and how to use it)."""
    loaded = load(job)
    if job.start == "exit-head":
        return _exit_head(job, loaded, on_progress, on_status)
    return _drafter(job, loaded, on_progress, on_status)


def _drafter(job: DistillJob, loaded: Loaded, on_progress: OnProgress, on_status: OnStatus) -> str:
    """Distil a drafter model: the one given, or a new one of `job.shape`."""
    from specplay.backends.mlx.loading import check_token_mapping, load_model, upcast_for_cpu, vocab_table
    from specplay.train.distill import DistillConfig, distill
    from specplay.train.models import QUANTIZATION_KEYS, new_drafter, read_config

    if job.start == "draft":
        assert job.draft is not None
        drafter = load_model("draft", job.draft)
        check_token_mapping(loaded.target, drafter, vocab_table(loaded.target.tokenizer))
        draft = upcast_for_cpu(drafter.model)
        draft_config = {k: v for k, v in read_config(drafter.path).items() if k not in QUANTIZATION_KEYS}
        described = job.draft
    else:
        shape = job.shape
        assert shape is not None
        heads = shape.heads or None
        draft, draft_config = new_drafter(loaded.target_model, shape.layers, shape.width, heads, job.train.seed)
        described = f"a new drafter ({shape.layers} layers x {shape.width})"
    if job.last_layers is not None and job.last_layers > len(draft.layers):
        raise ConfigError("last_layers", f"is {job.last_layers} but the drafter has {len(draft.layers)} layers")
    on_status(f"distilling {described} on {job.target}'s distributions over {len(loaded.prompts)} prompts")
    config = DistillConfig(
        train=job.train,
        rollouts=job.rollouts,
        last_layers=job.last_layers,
        storage=job.storage,
        keep_worse=job.keep_worse,
    )
    provenance = {"target": job.target, "data": str(job.data), "draft": job.draft or job.shape_text}
    result = distill(
        loaded.target_model,
        draft,
        draft_config=draft_config,
        tokenizer_dir=loaded.target.path,
        prompts=loaded.prompts,
        eos_token_id=loaded.eos,
        out=job.out,
        config=config,
        on_progress=on_progress,
        on_status=on_status,
        provenance=provenance,
    )
    worse = " (worse than where it started: written as --keep-worse asks)" if result.worse else ""
    return (
        f"held-out KL(target || draft) {result.held_out_kl_before:.4f} -> {result.held_out_kl_after:.4f}{worse}; "
        f"drafter written to {job.out} (use it as --draft NAME={job.out})"
    )


def _exit_head(job: DistillJob, loaded: Loaded, on_progress: OnProgress, on_status: OnStatus) -> str:
    """Train an exit head for the target's first `job.shape.layers` layers."""
    from specplay.backends.mlx.loading import folder_identity
    from specplay.train.exit_head import ExitHeadConfig, distill_exit_head

    head = job.shape
    assert head is not None
    config = ExitHeadConfig(head.layers, job.train, head.mlp, job.rollouts)
    on_status(f"training an exit head after layer {head.layers} of {job.target} over {len(loaded.prompts)} prompts")
    provenance = {"target": job.target, "data": str(job.data)}
    result = distill_exit_head(
        loaded.target_model,
        loaded.prompts,
        eos_token_id=loaded.eos,
        out=job.out,
        config=config,
        target_identity=folder_identity(loaded.target),
        on_progress=on_progress,
        on_status=on_status,
        provenance=provenance,
    )
    return (
        f"held-out KL(target || exit after layer {head.layers}) {result.held_out_kl_before:.4f} -> "
        f"{result.held_out_kl_after:.4f}; head written to {job.out} "
        f"(use it as --draft exit=early-exit:layers={head.layers},head={job.out})"
    )
