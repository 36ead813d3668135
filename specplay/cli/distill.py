"""`specplay distill`: a drafter trained on the target's distributions over your own prompts.

Three ways to get one: tune an existing drafter (`--draft`), start a new one of a given shape
(`--new-drafter layers=N,width=W`), or train an exit head for the target's own first L layers
(`--exit-head layers=L`), used as `--draft NAME=early-exit:layers=L,head=OUT`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specplay.cli.configure import path_flag
from specplay.cli.render import warn
from specplay.config.models import model_spec
from specplay.errors import ConfigError, SpecplayError

SHAPE_KEYS = {"new_drafter": ("layers", "width", "heads"), "exit_head": ("layers", "mlp")}


@dataclass(frozen=True)
class Shape:
    """What `--new-drafter` or `--exit-head` asks for."""

    layers: int
    width: int = 0
    heads: int = 0
    mlp: int = 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distill",
        help="train a drafter on the target's distributions over your prompts (DistillSpec)",
        description="The target continues each prompt; the drafter learns the target's next-token "
        "distribution over that text (forward KL). The target's answers are computed once and reused. "
        "Interrupt at any time; the same command resumes.",
    )
    parser.add_argument(
        "--target", required=True, metavar="PATH|ID|FILE.gguf", help="the target the drafter will serve"
    )
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument("--draft", metavar="PATH|ID", help="the drafter to start from")
    start.add_argument(
        "--new-drafter",
        metavar="layers=N,width=W[,heads=H]",
        help="a new llama drafter of this shape, its embedding taken from the target's where the widths match",
    )
    start.add_argument(
        "--exit-head",
        metavar="layers=L[,mlp=N]",
        help="an exit head for the target's first L layers (a residual linear map, or an MLP N wide)",
    )
    parser.add_argument(
        "--data",
        required=True,
        type=Path,
        metavar="FILE|DIR",
        help="prompts: .txt (blank-line separated), "
        '.jsonl ("prompt" or "text" per line), or a folder of saved sessions',
    )
    parser.add_argument("--out", required=True, help="folder for the new drafter (usable as --draft DIR)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per training window")
    parser.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (warmup, then cosine decay)")
    parser.add_argument("--last-layers", type=int, default=None, metavar="N", help="tune only the last N layers")
    parser.add_argument("--rollout-tokens", type=int, default=128, help="tokens the target writes per prompt")
    parser.add_argument("--temperature", type=float, default=1.0, help="of the target's rollouts")
    parser.add_argument(
        "--raw", action="store_true", help="use the prompts as written, without the target's chat template"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage", choices=["float32", "float16"], default="float32")
    parser.set_defaults(command=distill)


def shape_of(text: str, field: str) -> Shape:
    """`layers=N,width=W,...` as a Shape; one line naming the flag when it is not."""
    values: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = (word.strip() for word in part.partition("="))
        number = value.isascii() and value.isdigit() and int(value) >= 1
        if not sep or key not in SHAPE_KEYS[field] or not number:
            keys = ", ".join(f"{k}=N" for k in SHAPE_KEYS[field])
            raise ConfigError(field, f"takes {keys}, whole numbers of 1 or more, separated by commas (got {text!r})")
        values[key] = int(value)
    if "layers" not in values or (field == "new_drafter" and "width" not in values):
        raise ConfigError(field, f"needs layers=N{' and width=W' if field == 'new_drafter' else ''} (got {text!r})")
    return Shape(**values)


def _check(args: argparse.Namespace) -> None:
    for field in ("steps", "batch_size", "seq_len", "rollout_tokens"):
        if getattr(args, field) < 1:
            raise ConfigError(field, f"must be at least 1 (got {getattr(args, field)})")
    if not 0 < args.lr < math.inf:  # also refuses NaN
        raise ConfigError("lr", f"must be a finite number above 0 (got {args.lr})")
    if not 0 <= args.temperature < math.inf:
        raise ConfigError("temperature", f"must be a finite number, 0 or more (got {args.temperature})")
    if args.seed < 0:
        raise ConfigError("seed", f"must be 0 or more (got {args.seed})")
    if args.last_layers is not None and args.last_layers < 1:
        raise ConfigError("last_layers", f"must be at least 1 (got {args.last_layers})")
    if args.last_layers is not None and args.exit_head:
        raise ConfigError("last_layers", "tunes a drafter's layers; an exit head has none")
    if args.out.exists() and (args.out / "config.json").exists() and not (args.out / "work").exists():
        raise SpecplayError(f"{args.out} already holds a model; choose another --out")
    try:  # now, not after the rollouts: a folder that cannot be written would waste them
        (args.out / "work").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecplayError(f"cannot write to --out {args.out}: {exc.strerror or exc}; choose another folder") from None


@dataclass(frozen=True)
class _Job:
    """What every kind of distillation starts from."""

    args: argparse.Namespace
    target: Any
    """The target as loaded (its folder, tokenizer, identity)."""
    target_model: Any
    """Its model in fp32, frozen."""
    prompts: list[list[int]]
    eos: int
    on_progress: Any
    on_status: Any


def distill(args: argparse.Namespace) -> int:
    args.out = path_flag(args.out, "out")
    _check(args)
    shape = shape_of(args.new_drafter, "new_drafter") if args.new_drafter else None
    head = shape_of(args.exit_head, "exit_head") if args.exit_head else None
    target_source = model_spec("target", "target", args.target, "target").location or args.target
    from specplay.train.prompts import read_prompts

    prompts = read_prompts(args.data)

    from specplay.backends.mlx import blas
    from specplay.backends.mlx.loading import encode_prompt, load_model, upcast_for_cpu

    if message := blas.slow_blas_warning():
        warn(message)
    target = load_model("target", target_source)
    eos = target.tokenizer.eos_token_id
    if eos is None:
        raise SpecplayError(f"target {args.target!r} has no end-of-sequence token; its tokenizer config must name one")
    token_ids = [encode_prompt(target.tokenizer, p, args.raw) for p in prompts]  # as `run` encodes them
    with _progress(args.steps) as (on_progress, on_status):
        job = _Job(args, target, upcast_for_cpu(target.model), token_ids, eos, on_progress, on_status)
        try:
            return _exit_head(job, head) if head is not None else _drafter(job, shape)
        except KeyboardInterrupt:
            on_status(f"interrupted; run the same command to resume from {args.out / 'work'}")
            return 130
        except SpecplayError:
            raise  # a ConfigError is a ValueError too: keep its own line
        except ValueError as exc:  # what training refuses (a resumed checkpoint of other settings)
            raise SpecplayError(str(exc)) from None


def _drafter(job: _Job, shape: Shape | None) -> int:
    """Distil a drafter model: the one given, or a new one of `shape`."""
    from specplay.backends.mlx.loading import check_token_mapping, load_model, upcast_for_cpu, vocab_table
    from specplay.train.distill import DistillConfig
    from specplay.train.distill import distill as run_distill
    from specplay.train.models import QUANTIZATION_KEYS, new_drafter, read_config
    from specplay.train.rollouts import RolloutConfig

    args = job.args
    if shape is None:
        loaded = load_model("draft", args.draft)
        check_token_mapping(job.target, loaded, vocab_table(job.target.tokenizer))
        draft = upcast_for_cpu(loaded.model)
        draft_config = {k: v for k, v in read_config(loaded.path).items() if k not in QUANTIZATION_KEYS}
        described = args.draft
    else:
        draft, draft_config = new_drafter(job.target_model, shape.layers, shape.width, shape.heads or None, args.seed)
        described = f"a new drafter ({shape.layers} layers x {shape.width})"
    if args.last_layers is not None and args.last_layers > len(draft.layers):
        raise ConfigError("last_layers", f"is {args.last_layers} but the drafter has {len(draft.layers)} layers")
    job.on_status(f"distilling {described} on {args.target}'s distributions over {len(job.prompts)} prompts")
    config = DistillConfig(
        train=_train_config(args),
        rollouts=RolloutConfig(args.rollout_tokens, args.temperature),
        last_layers=args.last_layers,
        storage=args.storage,
    )
    provenance = {"target": args.target, "data": str(args.data), "draft": args.draft or args.new_drafter}
    result = run_distill(
        job.target_model,
        draft,
        draft_config,
        job.target.path,
        job.prompts,
        job.eos,
        args.out,
        config,
        on_progress=job.on_progress,
        on_status=job.on_status,
        provenance=provenance,
    )
    print(
        f"held-out KL(target || draft) {result.held_out_kl_before:.4f} -> {result.held_out_kl_after:.4f}; "
        f"drafter written to {args.out} (use it as --draft NAME={args.out})"
    )
    return 0


def _exit_head(job: _Job, head: Shape) -> int:
    """Train an exit head for the target's first `head.layers` layers."""
    from specplay.backends.mlx.loading import folder_identity
    from specplay.train.exit_head import ExitHeadConfig, distill_exit_head
    from specplay.train.rollouts import RolloutConfig

    args = job.args
    rollouts = RolloutConfig(args.rollout_tokens, args.temperature)
    config = ExitHeadConfig(head.layers, _train_config(args), head.mlp, rollouts)
    job.on_status(f"training an exit head after layer {head.layers} of {args.target} over {len(job.prompts)} prompts")
    provenance = {"target": args.target, "data": str(args.data)}
    result = distill_exit_head(
        job.target_model,
        job.prompts,
        job.eos,
        args.out,
        config,
        folder_identity(job.target),
        job.on_progress,
        job.on_status,
        provenance,
    )
    print(
        f"held-out KL(target || exit after layer {head.layers}) {result.held_out_kl_before:.4f} -> "
        f"{result.held_out_kl_after:.4f}; head written to {args.out} "
        f"(use it as --draft exit=early-exit:layers={head.layers},head={args.out})"
    )
    return 0


def _train_config(args: argparse.Namespace) -> Any:
    from specplay.train.trainer import TrainConfig

    return TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        learning_rate=args.lr,
        warmup_steps=min(30, args.steps // 10),
        seed=args.seed,
    )


class _progress:
    """A progress bar for the steps, and a status line printer above it."""

    def __init__(self, steps: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  {task.fields[speed]}"),
            TimeRemainingColumn(),
        )
        self.bar = Progress(*columns, transient=False)
        self.task = self.bar.add_task("steps", total=steps, loss="-", speed="")

    def __enter__(self) -> tuple[Any, Any]:
        self.bar.__enter__()

        def on_progress(p: Any) -> None:
            self.bar.update(self.task, completed=p.step, loss=f"{p.loss:.4f}", speed=f"{p.tokens_per_s:,.0f} tokens/s")

        return on_progress, lambda text: self.bar.console.print(text, markup=False, highlight=False)

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)  # type: ignore[arg-type]
