"""`specplay distill`: a drafter trained on the target's distributions over your own prompts.

Three ways to get one: tune an existing drafter (`--draft`), start a new one of a given shape
(`--new-drafter layers=N,width=W`), or train an exit head for the target's own first L layers
(`--exit-head layers=L`), used as `--draft NAME=early-exit:layers=L,head=OUT`.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specplay.cli.configure import path_flag
from specplay.cli.render import make_console, warn
from specplay.config.model_sets import named_set
from specplay.drafters import parse_model
from specplay.drafters.early_exit import HEAD_MLP_LIMIT
from specplay.errors import ConfigError, SpecplayError
from specplay.files.outputs import OUT_FIX, check_outputs

if TYPE_CHECKING:
    from specplay.train.job import DistillJob, Shape

OUT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "distill.json",
    "exit_head.json",
    "exit_head.safetensors",
)
"""What distill writes in --out, known before the target loads (its tokenizer's other files are
checked when they are known)."""
SHAPE_KEYS = {"new_drafter": ("layers", "width", "heads"), "exit_head": ("layers", "mlp")}
SHAPE_LIMITS = {"layers": 256, "width": 16384, "heads": 256, "mlp": HEAD_MLP_LIMIT}
"""The largest of each dimension specplay builds: a drafter is small, and MLX crashes rather than
failing on a shape too large to allocate."""


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
    parser.add_argument(
        "--keep-worse",
        action="store_true",
        help="write the drafter even where training made its held-out KL worse (else nothing is written)",
    )
    parser.set_defaults(command=distill)


def shape_of(text: str, field: str) -> Shape:
    """`layers=N,width=W,...` as a Shape; one line naming the flag when it is not."""
    values: dict[str, int] = {}
    shown = text if len(text) <= 80 else f"{text[:60]}… ({len(text)} characters)"
    for part in text.split(","):
        key, sep, value = (word.strip() for word in part.partition("="))
        number = value.isascii() and value.isdigit() and len(value) < 20 and int(value) >= 1
        if not sep or key not in SHAPE_KEYS[field] or not number:
            keys = ", ".join(f"{k}=N" for k in SHAPE_KEYS[field])
            raise ConfigError(field, f"takes {keys}, whole numbers of 1 or more, separated by commas (got {shown!r})")
        if int(value) > SHAPE_LIMITS[key]:
            raise ConfigError(field, f"{key} is at most {SHAPE_LIMITS[key]} (got {value}); choose a smaller shape")
        values[key] = int(value)
    if "layers" not in values or (field == "new_drafter" and "width" not in values):
        raise ConfigError(field, f"needs layers=N{' and width=W' if field == 'new_drafter' else ''} (got {shown!r})")
    from specplay.train.job import Shape

    return Shape(**values)


def _check(args: argparse.Namespace, out: Path) -> None:
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
    if out.exists() and (out / "config.json").exists() and not (out / "work").exists():
        raise SpecplayError(f"{out} already holds a model; choose another --out")
    check_outputs(out, OUT_FILES, OUT_FIX)  # now, not after training
    try:  # now, not after the rollouts: a folder that cannot be written would waste them
        (out / "work").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecplayError(f"cannot write to --out {out}: {exc.strerror or exc}; choose another folder") from None


def distill(args: argparse.Namespace) -> int:
    job = _job(args)
    from specplay.backends.mlx import blas
    from specplay.train.job import run_job

    if message := blas.slow_blas_warning():
        warn(message)
    with _progress(args.steps) as (on_progress, on_status):
        try:
            print(run_job(job, on_progress, on_status))
            return 0
        except KeyboardInterrupt:
            on_status(f"interrupted; run the same command to resume from {job.out / 'work'}")
            return 130
        except SpecplayError:
            raise  # a ConfigError is a ValueError too: keep its own line
        except ValueError as exc:  # what training refuses (a resumed checkpoint of other settings)
            raise SpecplayError(str(exc)) from None


def _job(args: argparse.Namespace) -> DistillJob:
    """The flags as a typed job, checked."""
    from specplay.train.job import DistillJob
    from specplay.train.rollouts import RolloutConfig
    from specplay.train.trainer import TrainConfig

    out = path_flag(args.out, "out")
    _check(args, out)
    start = "exit-head" if args.exit_head else "new-drafter" if args.new_drafter else "draft"
    shape_text = args.exit_head or args.new_drafter
    shape = shape_of(shape_text, start.replace("-", "_")) if shape_text else None
    train = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        learning_rate=args.lr,
        warmup_steps=min(30, args.steps // 10),
        seed=args.seed,
    )
    return DistillJob(
        target=args.target,
        target_model=target_location(args.target),
        start=start,
        data=args.data,
        out=out,
        train=train,
        rollouts=RolloutConfig(args.rollout_tokens, args.temperature),
        raw=args.raw,
        draft=args.draft,
        shape=shape,
        shape_text=shape_text,
        last_layers=args.last_layers,
        storage=args.storage,
        keep_worse=args.keep_worse,
    )


def target_location(written: str) -> str:
    """--target as `run` takes it: `demo` or a catalog name (that set's target), else a folder, a
    GGUF file or a Hugging Face id."""
    models = named_set(written)
    target = models.target if models is not None else parse_model("target", "target", written, "target")
    return target.location or written


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
        self.bar = Progress(*columns, console=make_console(), transient=False)
        self.task = self.bar.add_task("steps", total=steps, loss="-", speed="")

    def __enter__(self) -> tuple[Any, Any]:
        self.bar.__enter__()

        def on_progress(p: Any) -> None:
            loss = "-" if p.loss is None else f"{p.loss:.4f}"
            speed = "" if p.tokens_per_s is None else f"{p.tokens_per_s:,.0f} tokens/s"
            self.bar.update(self.task, completed=p.step, loss=loss, speed=speed)

        return on_progress, lambda text: self.bar.console.print(text, markup=False, highlight=False)

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)  # type: ignore[arg-type]
