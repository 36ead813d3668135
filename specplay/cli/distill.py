"""`specplay distill`: a drafter trained on the target's distributions over your own prompts."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from specplay.cli.render import warn
from specplay.errors import ConfigError, SpecplayError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distill",
        help="train a drafter on the target's distributions over your prompts (DistillSpec)",
        description="The target continues each prompt; the drafter learns the target's next-token "
        "distribution over that text (forward KL). Interrupt at any time; the same command resumes.",
    )
    parser.add_argument("--target", required=True, metavar="PATH|ID", help="the target the drafter will serve")
    parser.add_argument("--draft", required=True, metavar="PATH|ID", help="the drafter to start from")
    parser.add_argument(
        "--data",
        required=True,
        type=Path,
        metavar="FILE|DIR",
        help="prompts: .txt (blank-line separated), "
        '.jsonl ("prompt" or "text" per line), or a folder of saved sessions',
    )
    parser.add_argument("--out", required=True, type=Path, help="folder for the new drafter (usable as --draft DIR)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per training window")
    parser.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (warmup, then cosine decay)")
    parser.add_argument("--last-layers", type=int, default=None, metavar="N", help="tune only the last N layers")
    parser.add_argument("--rollout-tokens", type=int, default=128, help="tokens the target writes per prompt")
    parser.add_argument("--temperature", type=float, default=1.0, help="of the target's rollouts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage", choices=["float32", "float16"], default="float32")
    parser.set_defaults(command=distill)


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
    if args.out.exists() and (args.out / "config.json").exists() and not (args.out / "work").exists():
        raise SpecplayError(f"{args.out} already holds a model; choose another --out")


def distill(args: argparse.Namespace) -> int:
    _check(args)
    from specplay.train.prompts import read_prompts

    prompts = read_prompts(args.data)

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from specplay.backends.mlx import blas
    from specplay.backends.mlx.loading import check_token_mapping, load_model, upcast_for_cpu, vocab_table
    from specplay.train.distill import DistillConfig
    from specplay.train.distill import distill as run_distill
    from specplay.train.models import QUANTIZATION_KEYS, read_config
    from specplay.train.trainer import TrainConfig

    if message := blas.slow_blas_warning():
        warn(message)
    target = load_model("target", args.target)
    draft = load_model("draft", args.draft)
    check_token_mapping(target, draft, vocab_table(target.tokenizer))
    eos = target.tokenizer.eos_token_id
    if eos is None:
        raise SpecplayError(f"target {args.target!r} has no end-of-sequence token; its tokenizer config must name one")
    if args.last_layers is not None and args.last_layers > len(draft.model.layers):
        raise ConfigError("last_layers", f"is {args.last_layers} but the drafter has {len(draft.model.layers)} layers")
    token_ids = [target.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    config = DistillConfig(
        train=TrainConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            learning_rate=args.lr,
            warmup_steps=min(30, args.steps // 10),
            seed=args.seed,
        ),
        rollout_tokens=args.rollout_tokens,
        temperature=args.temperature,
        last_layers=args.last_layers,
        storage=args.storage,
    )
    draft_config = {k: v for k, v in read_config(draft.path).items() if k not in QUANTIZATION_KEYS}
    provenance = {"target": args.target, "draft": args.draft, "data": str(args.data)}
    print(f"distilling {args.draft} on {args.target}'s distributions over {len(prompts)} prompts", file=sys.stderr)

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}  {task.fields[speed]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("steps", total=args.steps, loss="-", speed="")

        def on_progress(p: object) -> None:
            progress.update(task, completed=p.step, loss=f"{p.loss:.4f}", speed=f"{p.tokens_per_s:,.0f} tokens/s")

        try:
            result = run_distill(
                upcast_for_cpu(target.model),
                upcast_for_cpu(draft.model),
                draft_config,
                draft.path,
                token_ids,
                eos,
                args.out,
                config,
                on_progress=on_progress,
                on_status=progress.console.print,
                provenance=provenance,
            )
        except KeyboardInterrupt:
            progress.console.print(f"interrupted; run the same command to resume from {args.out / 'work'}")
            return 130
        except ValueError as exc:
            raise SpecplayError(str(exc)) from None
    print(
        f"held-out KL(target || draft) {result.held_out_kl_before:.4f} -> {result.held_out_kl_after:.4f}; "
        f"drafter written to {args.out} (use it as --draft NAME={args.out})"
    )
    return 0
