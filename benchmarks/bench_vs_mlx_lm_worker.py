"""One side of bench_vs_mlx_lm.py --processes: a warm-up, then one timed generation, in this process.

    python benchmarks/bench_vs_mlx_lm_worker.py --side specplay --mode speculative --target DIR --draft DIR

prints one JSON line. specplay runs as `specplay run` does (the CLI's flags, its model thread and
its event stream); mlx-lm through `stream_generate`, as its own CLI does. Both sides load OpenBLAS
the same way and run the same fp32 weights. Both count (tokens after the first) / (time from
the first token to the last) where the tokens are made: mlx-lm by this script's clock as
stream_generate yields them, specplay by its engine's clock as it commits them on the model
thread. (The model thread hands tokens to the reading thread in batches, a few times a second,
so arrival times there would not say when a token was made; what the reading costs the model
thread still shows in its clock.)
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core, for both sides alike)

# isort: split
import mlx.core as mx
from bench_vs_mlx_lm import Run, mlx_lm_acceptance

from specplay.backends.mlx import blas

SIDES = ("specplay", "mlx-lm")
MODES = ("speculative", "target")
PATHS = ("cli", "engine")
DRAFTER = "draft"


@dataclass
class Result:
    """What the parent reads back: one JSON line."""

    side: str
    mode: str
    tokens_per_s: float
    ids: list[int]
    wall_s: float
    cpu_s: float
    warmup_s: float
    blas_threads: int | None
    acceptance: float | None = None
    tokens_per_round: float | None = None
    per_round_ms: dict[str, float] = field(default_factory=dict)


Generate = Callable[[int], Run]
"""Generate n tokens, timed."""


def openblas_threads() -> int | None:
    if blas.OPENBLAS_PATH is None:
        return None
    return int(ctypes.CDLL(blas.OPENBLAS_PATH).openblas_get_num_threads())


def specplay_side(args: argparse.Namespace) -> tuple[Generate, Callable[[], None]]:
    """A `specplay run` with these flags, its tokens timed where the CLI reads them: on the main
    thread, the engine running on the model thread (`--path cli`), or the engine's events consumed
    where it runs, on the main thread (`--path engine`, as the in-process benchmark does)."""
    from specplay.backends import open_source, thread_cleanup
    from specplay.cli import build_parser
    from specplay.cli.run import configure
    from specplay.engine.controls import LiveControls
    from specplay.engine.events import DoneEvent, RoundEvent, StepEvent
    from specplay.engine.request import Request
    from specplay.runner.session_run import run_sample
    from specplay.runner.thread import ModelThread

    flags = ["run", "--target", args.target, "--mode", args.mode, "--k", str(args.k), "--temperature", "0"]
    flags += ["--prompt", args.prompt, "--raw", "--ignore-eos", "--max-tokens", str(args.max_tokens)]
    if args.mode == "speculative":
        flags += ["--draft", f"{DRAFTER}={args.draft}"]
    config = configure(build_parser().parse_args(flags))
    thread = ModelThread(on_exit=thread_cleanup(config))
    source = thread.call(lambda: open_source(config)) if args.path == "cli" else open_source(config)
    ids = tuple(source.encode(args.prompt, raw=True))

    def take(timed: Run, event: Any) -> None:
        if isinstance(event, RoundEvent):
            for token in event.tokens:
                timed.arrive(token.token_id)
        elif isinstance(event, StepEvent):
            timed.arrive(event.token.token_id)
        elif isinstance(event, DoneEvent):
            timed.metrics = event.metrics

    def generate(n: int) -> Run:
        timed = Run()
        request = Request(args.prompt, ids, args.mode, 0, n, ignore_eos=True)
        if args.path == "cli":
            run_sample(thread, source, config, request, lambda _, event: take(timed, event), save=False, baseline=False)
        else:
            for event in source.generate(request, LiveControls(config.settings, source.drafters)):
                take(timed, event)
        return timed

    def close() -> None:
        thread.call(source.close)
        thread.close()

    return generate, close


def mlx_lm_side(args: argparse.Namespace) -> tuple[Generate, Callable[[], None]]:
    """mlx-lm's stream_generate on the same weights specplay runs (fp32 on CPUs)."""
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    from specplay.backends.mlx.loading import encode_prompt, resolve_model_path, upcast_for_cpu

    def load(source: str) -> tuple[Any, Any]:
        model, tokenizer = mlx_lm.load(str(resolve_model_path(source)))
        return (upcast_for_cpu(model) if mx.default_device() == mx.cpu else model), tokenizer

    model, tokenizer = load(args.target)
    draft = load(args.draft)[0] if args.mode == "speculative" else None
    ids = encode_prompt(tokenizer, args.prompt, raw=True)
    tokenizer = copy.copy(tokenizer)
    tokenizer.eos_token_ids = ()  # mlx-lm has no ignore_eos: a tokenizer without EOS ids stands in for it
    extra: dict[str, Any] = {"sampler": make_sampler(temp=0.0)}
    if draft is not None:
        extra.update(draft_model=draft, num_draft_tokens=args.k)

    def generate(n: int) -> Run:
        timed = Run()
        for response in mlx_lm.stream_generate(model, tokenizer, ids, max_tokens=n, **extra):
            timed.arrive(response.token, response.from_draft)
        return timed

    return generate, lambda: None


def summarize(args: argparse.Namespace, timed: Run, wall_s: float, cpu_s: float, warmup_s: float) -> Result:
    tokens_per_s = timed.metrics["tokens_per_s"] if args.side == "specplay" else timed.tokens_per_s()
    result = Result(args.side, args.mode, tokens_per_s, timed.ids, wall_s, cpu_s, warmup_s, openblas_threads())
    if args.mode != "speculative":
        return result
    if args.side == "mlx-lm":
        result.acceptance, result.tokens_per_round = mlx_lm_acceptance(timed.from_draft, args.k)
        return result
    metrics = timed.metrics
    result.acceptance, result.tokens_per_round = metrics["draft_acceptance_rate"], metrics["mean_acceptance_length"]
    rounds = metrics["num_spec_steps"]
    result.per_round_ms = {key: metrics[f"{key}_ms"] / rounds for key in ("draft", "verify", "overhead")}
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--side", choices=SIDES, required=True)
    add("--mode", choices=MODES, required=True)
    add("--target", required=True, help="an mlx-lm folder or a GGUF file")
    add("--draft", help="the drafter's folder (speculative mode)")
    add("--k", type=int, default=3)
    add("--max-tokens", type=int, default=200)
    add("--warmup-tokens", type=int, default=32, help="tokens generated before the timed run")
    add("--prompt", required=True)
    add("--path", choices=PATHS, default="cli", help="specplay: through `specplay run`'s threads, or in place")
    args = parser.parse_args()
    if args.mode == "speculative" and not args.draft:
        parser.error("--mode speculative needs --draft")
    return args


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    generate, close = (specplay_side if args.side == "specplay" else mlx_lm_side)(args)
    start = time.perf_counter()
    generate(args.warmup_tokens)
    warmup_s = time.perf_counter() - start
    wall, cpu = time.perf_counter(), time.process_time()
    timed = generate(args.max_tokens)
    wall_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    close()
    print(json.dumps(asdict(summarize(args, timed, wall_s, cpu_s, warmup_s))), flush=True)


if __name__ == "__main__":
    main()
