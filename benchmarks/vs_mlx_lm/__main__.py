"""specplay against mlx-lm's own generation, on the same models.

Measures greedy speculative and target-only tokens/s (the two sides alternate repeat by repeat,
since these machines have slow phases) and acceptance at temperature 1: specplay's lossless
rejection sampling against mlx-lm's exact-match rule. Both sides' tokens/s come from this
script's clock: (tokens after the first) / (last arrival - first arrival) in the consumer loop.

    python -m benchmarks.vs_mlx_lm                  # in one process, random models built in a temp dir
    python -m benchmarks.vs_mlx_lm --control mlx-lm # and mlx-lm against itself, alternated the same way
    python -m benchmarks.vs_mlx_lm --blas-threads   # OpenBLAS's 1 and 2 threads, alternated in one process
    python -m benchmarks.vs_mlx_lm --target smollm2 --draft smollm2   # any model of specplay's
    python -m benchmarks.vs_mlx_lm --processes      # a fresh process per measurement (below)
    python -m benchmarks.vs_mlx_lm --processes --blas-threads 1,2
    python -m benchmarks.vs_mlx_lm --processes --control mlx-lm   # mlx-lm against itself
    python -m benchmarks.vs_mlx_lm --profile        # where a round's time goes, on the smallest models

--processes (processes.py) runs specplay as `specplay run` does and mlx-lm's
stream_generate each in its own process, the two generating in alternating turns of a few
tenths of a second, on the smallest models, the demo models and SmolLM2 (`specplay fetch
smollm2`; the row is skipped, saying so, when it is not fetched), and prints each row's median
paired ratio with its spread. With --control, both processes of a pair run the same side: the
ratios a row would read if the two sides were equal, so a reading's distance from 1 can be set
against them.
--profile (profile_round.py) splits specplay's round into graph building, dispatch, compute,
transfer, events and detokenization.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.vs_mlx_lm import processes
from benchmarks.vs_mlx_lm.one_process import DEFAULT_PROMPT, build_models, measure


def folder(source: str) -> Path:
    """The mlx-lm folder specplay loads for `source` (a fetched name, a GGUF file converted once, a folder)."""
    from specplay.backends.mlx.loading import resolve_model_path
    from specplay.drafters import parse_model
    from specplay.errors import SpecplayError

    try:
        return resolve_model_path(parse_model("target", "target", source, "--target").location)
    except SpecplayError as error:
        raise SystemExit(f"vs_mlx_lm: {error}") from None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--models", type=Path, help="folder to build the random models in, or reuse (default: a temp dir)")
    add("--target", help="a model as for specplay (a fetched name, a GGUF file, a folder) instead (with --draft)")
    add("--draft", help="a model sharing the target's tokenizer, as for --target")
    add("--k", type=int, help="draft tokens per round (default 4; 3 with --processes and --profile)")
    add("--max-tokens", type=int, default=200, help="tokens per timed generation (default 200)")
    add("--repeats", type=int, help="timed repeats per side (default 5); with --processes, process pairs per row")
    add("--seeds", type=int, default=3, help="seeds for the temperature-1 acceptance (default 3)")
    add("--accept-tokens", type=int, default=100, help="tokens per temperature-1 generation (default 100)")
    add("--prompt", help="the prompt, encoded as written")
    add(
        "--blas-threads",
        nargs="?",
        const="1,2",
        metavar="N,M",
        help="compare OpenBLAS thread counts (default 1,2), alternated in one process; with --processes, as rows",
    )
    add("--pairs", type=int, default=8, help="--blas-threads: generation pairs per row (default 8)")
    add(
        "--mlx-lm-threads",
        metavar="N",
        help="--processes: OPENBLAS_NUM_THREADS for mlx-lm's processes only (its best count), specplay's left"
        " to choose its own",
    )
    modes = parser.add_argument_group("process mode and profile")
    modes.add_argument("--processes", action="store_true", help="each measurement in a fresh process")
    modes.add_argument(
        "--sets", default="smallest,demo,smollm2", help="model sets for --processes and --blas-threads (default: all)"
    )
    modes.add_argument(
        "--modes", default="speculative,target", help="--processes, --blas-threads: rows per model set (default: both)"
    )
    modes.add_argument("--smollm2", default="smollm2", help="SmolLM2 as a catalog name, folder or GGUF file")
    modes.add_argument("--warmup-tokens", type=int, default=16, help="warm-up per process (default 16)")
    modes.add_argument("--generations", type=int, default=3, help="generations per process pair (default 3)")
    modes.add_argument("--turn-s", type=float, default=0.3, help="seconds per turn (default 0.3)")
    modes.add_argument("--save", type=Path, help="--processes: write every turn and generation here as JSON")
    modes.add_argument(
        "--specplay-path",
        choices=tuple(processes.SPECPLAY_PATHS),
        default="cli",
        help="--processes: specplay as `specplay run` runs it (default), its engine's events consumed bare, "
        "or its MLX backend with no engine (greedy)",
    )
    modes.add_argument(
        "--control",
        choices=("specplay", "mlx-lm"),
        help="both sides of a pair run this side (A/A: its ratios are the harness's own spread); in one process, "
        "as extra rows",
    )
    modes.add_argument("--profile", action="store_true", help="specplay's round, split by where its time goes")
    args = parser.parse_args()
    if (args.target is None) != (args.draft is None):
        parser.error("--target and --draft go together")
    process_like = args.processes or args.profile or bool(args.blas_threads)
    args.k = args.k or (3 if process_like else 4)
    args.prompt = args.prompt or (processes.PROMPT if process_like else DEFAULT_PROMPT)
    if args.control and (args.profile or args.blas_threads):
        parser.error("--control goes with --processes or the one-process mode")
    if not args.processes:
        args.repeats = args.repeats or 5
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="specplay-bench-") as tmp:
        if args.processes:
            processes.main(args, args.models or Path(tmp))
            return
        if args.blas_threads:
            from benchmarks.vs_mlx_lm import blas_threads

            blas_threads.main(args, args.models or Path(tmp))
            return
        if args.profile:
            from benchmarks.vs_mlx_lm import profile_round  # its profilers load only here

            profile_round.main(args, args.models or Path(tmp))
            return
        target, draft = (
            (folder(args.target), folder(args.draft)) if args.target else build_models(args.models or Path(tmp))
        )
        measure(args, target, draft)


if __name__ == "__main__":
    main()
