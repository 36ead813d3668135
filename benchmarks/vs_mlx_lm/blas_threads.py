"""`python -m benchmarks.vs_mlx_lm --blas-threads`: OpenBLAS's thread counts against each other, in one process.

OpenBLAS takes a new thread count at run time (openblas_set_num_threads), so one process can
alternate the counts generation by generation: every count sees the same phases of the machine,
the same loaded weights and the same warm allocator, and a ratio needs no fresh process per
side. Each pair of generations runs every count on specplay and on mlx-lm, in an order that
rotates from pair to pair; a row prints, per side, the median over pairs of each count's tokens/s
over the first count's, with the interquartile range. It is what decided specplay's default
(`specplay.backends.mlx.blas.default_threads`).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
from pathlib import Path

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split

from benchmarks.vs_mlx_lm.one_process import DRAFTER, Sides
from benchmarks.vs_mlx_lm.processes import ModelSet, model_sets
from specplay.backends.mlx import blas, load_mlx_backend
from specplay.bench.stats import quartiles

FAST_REPEATS = 3
"""Process pairs --processes gives the fast model sets."""


def set_threads(count: int) -> None:
    assert blas.OPENBLAS_PATH is not None
    ctypes.CDLL(blas.OPENBLAS_PATH).openblas_set_num_threads(count)


def measure_row(sides: Sides, speculative: bool, counts: list[int], pairs: int, args: argparse.Namespace) -> str:
    """One model set and mode: each count's tokens/s over the first count's, per side."""
    mode = "speculative" if speculative else "target"
    runs = {
        "specplay": lambda n: sides.specplay(mode, n).tokens_per_s(),
        "mlx-lm": lambda n: sides.mlx_lm(speculative, n).tokens_per_s(),
    }
    cells = [(side, count) for side in runs for count in counts]
    speeds: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    for side, count in cells:  # warm-up, untimed
        set_threads(count)
        runs[side](32)
    for pair in range(pairs):
        shift = pair % len(cells)
        for side, count in cells[shift:] + cells[:shift]:
            set_threads(count)
            speeds[side, count].append(runs[side](args.max_tokens))
    line = f"  {mode:<12}"
    for side in runs:
        base = speeds[side, counts[0]]
        line += f"  {side}: " + " / ".join(f"{statistics.median(speeds[side, c]):.1f}" for c in counts) + " tok/s"
        for count in counts[1:]:
            q1, median, q3 = quartiles([a / b for a, b in zip(speeds[side, count], base, strict=True)])
            line += f" ({count} over {counts[0]}: {median:.3f}, IQR {q1:.3f}-{q3:.3f})"
    return line


def pairs_for(models: ModelSet, args: argparse.Namespace) -> int:
    """--pairs on the fast model sets; a slow one (fewer process pairs in --processes) gets fewer."""
    if not models.repeats:  # --target and --draft
        return args.pairs
    return max(2, round(args.pairs * min(models.repeats, FAST_REPEATS) / FAST_REPEATS))


def main(args: argparse.Namespace, models_root: Path) -> None:
    if blas.OPENBLAS_PATH is None:
        raise SystemExit(f"--blas-threads compares OpenBLAS thread counts, and none is loaded: {blas.INSTALL_HINT}")
    counts = [int(c) for c in args.blas_threads.split(",")]
    if args.target:
        sets = [ModelSet("given", "--target and --draft", args.target, args.draft, repeats=0)]
    else:
        sets, skipped = model_sets(args.sets, models_root, args.smollm2)
        for line in skipped:
            print(line)
    print(
        f"OpenBLAS thread counts {counts} alternated in one process: {args.pairs} pairs of {args.max_tokens}-token "
        f"generations per row (fewer on slow models), greedy, k={args.k}; tokens/s medians, then each count over "
        f"{counts[0]}"
    )
    original = ctypes.CDLL(blas.OPENBLAS_PATH).openblas_get_num_threads()
    try:
        for models in sets:
            backend = load_mlx_backend(str(models.target), [(DRAFTER, str(models.draft))])
            sides = Sides(backend, args.prompt, args.k)
            print(f"{models.name}: {models.about}", flush=True)
            for mode in args.modes.split(","):
                print(measure_row(sides, mode == "speculative", counts, pairs_for(models, args), args), flush=True)
            backend.close()
    finally:
        set_threads(original)
