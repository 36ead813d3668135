"""bench_vs_mlx_lm.py --processes: specplay against mlx-lm, each measurement a fresh process.

In one process the two sides share a heap, BLAS threads and a warm allocator, and whichever runs
second inherits the first's state; here every measurement starts its own interpreter (the worker,
bench_vs_mlx_lm_worker.py), warms up, and times one generation. Within a repeat every row runs
one pair, and which side goes first alternates from pair to pair, so a slow phase of the machine
falls on both sides. A row's ratio is the median of its paired ratios (specplay / mlx-lm).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx

from specplay.backends.mlx import blas, build

WORKER = Path(__file__).with_name("bench_vs_mlx_lm_worker.py")
PROMPT = 'import os\nimport sys\n\n\ndef parse_args(argv):\n    """Parse the command line arguments."""\n'
MODES = ("speculative", "target")
SPECPLAY_PATHS = {
    "cli": "as `specplay run` (engine on its model thread, events read on the main thread)",
    "engine": "the engine's events consumed on the main thread, where it runs",
}
SIDES = ("specplay", "mlx-lm")
MIN_PAIRS = 3
"""Fewer pairs have no spread worth the name."""
SMALLEST_DAMPING = 0.07
"""How strongly the smallest target's later layers write into the residual stream: at 0.07 its
first layer (the drafter) agrees with the whole about half the time, as a trained pair might."""


@dataclass(frozen=True)
class ModelSet:
    name: str
    about: str
    """What the models are, and why this drafter."""
    target: Path
    draft: Path
    repeats: int
    """Pairs per row by default: long runs vary less, and cost more."""


@dataclass(frozen=True)
class Cell:
    """One row of the table: a model set, a mode and a BLAS thread count for both sides (None: the
    environment's, else specplay's default: both sides load OpenBLAS through specplay)."""

    models: ModelSet
    mode: str
    threads: str | None

    def label(self, k: int) -> str:
        mode = f"speculative k={k}" if self.mode == "speculative" else "target-only"
        threads = f", {self.threads} BLAS threads" if self.threads else ""
        return f"{self.models.name} {mode}{threads}"


@dataclass
class Pairs:
    """Each side's worker results for one cell, in pair order."""

    sides: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def tokens_per_s(self, side: str) -> list[float]:
        return [r["tokens_per_s"] for r in self.sides[side]]

    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.tokens_per_s("specplay"), self.tokens_per_s("mlx-lm"), strict=True)]


# ---------------------------------------------------------------- the models


def truncated_copy(source: Path, out: Path, layers: int) -> None:
    """`source`'s first `layers` layers with its embedding, final norm and head: a smaller model
    of the same family and tokenizer, as a folder any mlx-lm program loads."""
    weights = mx.load(str(source / "model.safetensors"))
    kept = {name: value for name, value in weights.items() if _layer_of(name) < layers}
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), kept, metadata={"format": "mlx"})
    config = json.loads((source / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=layers), indent=2))
    for name in build.TOKENIZER_FILES:
        shutil.copyfile(source / name, out / name)


def _layer_of(weight_name: str) -> int:
    """The layer index of `model.layers.N.…`; -1 for weights outside the layers."""
    parts = weight_name.split(".")
    return int(parts[2]) if parts[:2] == ["model", "layers"] else -1


def damp_layers(folder: Path, first: int, scale: float) -> None:
    """Scale what layers `first`.. write into the residual stream (attention and MLP outputs), so
    a model cut after layer `first` predicts much as the whole model does."""
    path = str(folder / "model.safetensors")
    weights = mx.load(path)
    for name, value in weights.items():
        if _layer_of(name) >= first and name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = value * scale
    mx.save_safetensors(path, weights, metadata={"format": "mlx"})


def smallest_models(root: Path) -> ModelSet:
    """A 0.92M llama target (width 64, 13 layers) and its first layer as a 0.13M drafter; reused
    when `root` already holds them."""
    target, draft = root / "smallest-target", root / "smallest-draft"
    if not (draft / "model.safetensors").exists():
        build.train_tokenizer(build.read_texts(build.stdlib_sources(40)), root / "tokenizer", vocab_size=512)
        config = build.llama_config(64, 13, 512, tie_word_embeddings=False)
        build.write_model(target, config, root / "tokenizer", seed=0, output_scale=4.0)
        damp_layers(target, 1, SMALLEST_DAMPING)
        truncated_copy(target, draft, 1)
    about = (
        f"random llama, width 64, 13 layers, layers 2-13 damped to {SMALLEST_DAMPING}; "
        "drafter: its first layer with its embedding and head"
    )
    return ModelSet("smallest", about, target, draft, repeats=9)


def demo_models() -> ModelSet:
    from specplay.config.demo import demo_model_paths

    target, drafters = demo_model_paths()
    about = "the shipped demo target; drafter `base` (the one --route auto sends code to)"
    return ModelSet("demo", about, target, drafters["base"], repeats=5)


def smollm2_models(source: str) -> ModelSet | str:
    """SmolLM2 drafting for itself, or why the row is skipped. mlx-lm's speculative decoding takes
    a model drafter only (no prompt lookup, no early exit), and a cut-down SmolLM2 agrees about 1%
    of the time at a quarter of a target step per token; the target itself as drafter is the
    cheapest model both sides can run, and every round commits k + 1 tokens."""
    from specplay.backends.mlx.loading import resolve_model_path
    from specplay.config.models import model_spec
    from specplay.errors import SpecplayError

    try:
        folder = resolve_model_path(model_spec("target", "target", source, "--smollm2").location)
    except SpecplayError as error:
        return f"skipped: {error}"
    about = "SmolLM2-135M-Instruct (fp32 on CPUs); drafter: the same model loaded again (all drafts accepted)"
    return ModelSet("smollm2", about, folder, folder, repeats=3)


def parameters(folder: Path) -> float:
    """Millions of parameters in a model folder; a quantized weight counts its unpacked elements
    (each of its scales stands for one group)."""
    weights = mx.load(str(folder / "model.safetensors"))
    quantization = json.loads((folder / "config.json").read_text()).get("quantization", {})
    total = 0
    for name, value in weights.items():
        module = name.rsplit(".", 1)[0]
        if name.endswith((".scales", ".biases")):
            continue
        if f"{module}.scales" in weights:
            group = quantization.get(module, {}).get("group_size", quantization["group_size"])
            total += weights[f"{module}.scales"].size * group
        else:
            total += value.size
    return total / 1e6


# ---------------------------------------------------------------- running the pairs


def run_worker(cell: Cell, side: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, str(WORKER), "--side", side, "--mode", cell.mode, "--target", str(cell.models.target)]
    command += ["--draft", str(cell.models.draft), "--k", str(args.k), "--max-tokens", str(args.max_tokens)]
    command += ["--warmup-tokens", str(args.warmup_tokens), "--prompt", args.prompt, "--path", args.specplay_path]
    env = dict(os.environ, **({"OPENBLAS_NUM_THREADS": cell.threads} if cell.threads else {}))
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{side} worker failed on {cell.label(args.k)}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_pairs(cells: Sequence[Cell], args: argparse.Namespace) -> dict[Cell, Pairs]:
    """Repeat-major: every row gets a pair per repeat, so the rows share the machine's phases."""
    results = {cell: Pairs() for cell in cells}
    for repeat in range(max(repeats_of(cell.models, args) for cell in cells)):
        for index, cell in enumerate(cells):
            if repeat >= repeats_of(cell.models, args):
                continue
            order = SIDES if (repeat + index) % 2 == 0 else SIDES[::-1]
            for side in order:
                results[cell].sides[side].append(run_worker(cell, side, args))
            speeds = " ".join(f"{side} {results[cell].sides[side][-1]['tokens_per_s']:.1f}" for side in SIDES)
            print(f"  [{repeat + 1}] {cell.label(args.k)}: {speeds} tokens/s", file=sys.stderr, flush=True)
    return results


def repeats_of(models: ModelSet, args: argparse.Namespace) -> int:
    return args.repeats or models.repeats


# ---------------------------------------------------------------- the report


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def ratio_cells(ratios: Sequence[float]) -> list[str]:
    """Median, interquartile range, min..max, pairs above 1, and whether 1.0 lies outside the IQR
    (the spread is then smaller than the ratio's distance from 1)."""
    q1, median, q3 = quartiles(ratios)
    above = sum(r > 1 for r in ratios)
    resolved = ("yes" if q1 > 1 or q3 < 1 else "no") if len(ratios) >= MIN_PAIRS else f"<{MIN_PAIRS} pairs"
    return [
        f"{median:.3f}",
        f"{q1:.3f}..{q3:.3f}",
        f"{min(ratios):.2f}..{max(ratios):.2f}",
        f"{above}/{len(ratios)}",
        resolved,
    ]


def same_ids(pairs: Pairs) -> str:
    """Whether every run of both sides produced the same greedy ids; where they first differ if not."""
    runs = [r["ids"] for side in SIDES for r in pairs.sides[side]]
    first = runs[0]
    for ids in runs[1:]:
        if ids != first:
            at = next(
                (i for i, (a, b) in enumerate(zip(first, ids, strict=False)) if a != b), min(len(first), len(ids))
            )
            return f"no (token {at})"
    return "yes"


def print_table(results: dict[Cell, Pairs], args: argparse.Namespace) -> None:
    head = ["", "specplay", "mlx-lm", "ratio", "IQR", "min..max", ">1", "1 outside IQR", "same ids"]
    rows = [head, ["", "tokens/s", "tokens/s", "median", "", "", "", "", ""]]
    for cell, pairs in results.items():
        speeds = [f"{statistics.median(pairs.tokens_per_s(side)):.1f}" for side in SIDES]
        rows.append([cell.label(args.k), *speeds, *ratio_cells(pairs.ratios()), same_ids(pairs)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        cells = [cell.rjust(width) for cell, width in zip(row, widths, strict=True)]
        print("  ".join([row[0].ljust(widths[0]), *cells[1:]]))
    print(
        "ratio: median over pairs of specplay/mlx-lm tokens/s; IQR: the pairs' interquartile range; "
        "'1 outside IQR' yes: the spread is smaller than the ratio's distance from 1"
    )


def print_details(results: dict[Cell, Pairs], args: argparse.Namespace) -> None:
    """Acceptance (equal on both sides when greedy ids are), specplay's own per-round split, and
    greedy speculative output against target-only output per model set."""
    for cell, pairs in results.items():
        if cell.mode == "speculative":
            print(acceptance_line(cell, pairs, args.k))
    outputs: dict[str, dict[str, list[int]]] = {}
    for cell, pairs in results.items():
        outputs.setdefault(cell.models.name, {})[cell.mode] = pairs.sides["specplay"][0]["ids"]
    for name, modes in outputs.items():
        if len(modes) == 2:
            print(f"{name}: greedy speculative ids == target-only ids: {modes['speculative'] == modes['target']}")


def acceptance_line(cell: Cell, pairs: Pairs, k: int) -> str:
    ours, theirs = pairs.sides["specplay"][0], pairs.sides["mlx-lm"][0]
    split = ", ".join(
        f"{key} {statistics.median(r['per_round_ms'][key] for r in pairs.sides['specplay']):.2f}"
        for key in ours["per_round_ms"]
    )
    return (
        f"{cell.label(k)}: acceptance specplay {ours['acceptance']:.3f}, mlx-lm {theirs['acceptance']:.3f}; "
        f"tokens per round {ours['tokens_per_round']:.2f} / {theirs['tokens_per_round']:.2f}; "
        f"specplay per round (ms): {split}"
    )


def print_threads(results: dict[Cell, Pairs], threads: Sequence[str], args: argparse.Namespace) -> None:
    """Each side's tokens/s per BLAS thread count, and the paired ratio of the first count over the
    others (pairs of the same repeat ran minutes apart at most)."""
    base = threads[0]
    print(f"\nOPENBLAS_NUM_THREADS: tokens/s per side, and each count's over {base}'s (median, IQR)")
    for cell in results:
        if cell.threads != base:
            continue
        line = f"{cell.models.name} {cell.mode}:"
        for side in SIDES:
            speeds = {t: _cell_with(results, cell, t).tokens_per_s(side) for t in threads}
            line += f"  {side} " + " / ".join(f"{statistics.median(speeds[t]):.1f}" for t in threads)
            for t in threads[1:]:
                ratios = [a / b for a, b in zip(speeds[t], speeds[base], strict=False)]
                q1, median, q3 = quartiles(ratios)
                line += f" ({t} over {base}: {median:.3f}, {q1:.3f}..{q3:.3f})"
        print(line)


def _cell_with(results: dict[Cell, Pairs], cell: Cell, threads: str) -> Pairs:
    return results[Cell(cell.models, cell.mode, threads)]


def print_header(sets: Sequence[ModelSet], skipped: Sequence[str], args: argparse.Namespace) -> None:
    from importlib.metadata import version

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(
        f"python {platform.python_version()}, mlx {mx.__version__}, mlx-lm {version('mlx-lm')}, {mx.default_device()}"
    )
    print(f"BLAS: {blas.OPENBLAS_PATH or 'reference BLAS'}; threads: {blas.THREADS_CHOSEN}")
    print("MLX's CPU backend has no thread setting: each stream runs its work on one thread of its own")
    print(
        f"process mode: a fresh process per measurement ({args.warmup_tokens}-token warm-up, then {args.max_tokens} "
        f"tokens timed), sides alternating who goes first; greedy, k={args.k}, EOS ignored, same fp32 weights "
        "and OpenBLAS on both sides"
    )
    print(f"specplay: {SPECPLAY_PATHS[args.specplay_path]}; mlx-lm: stream_generate on the main thread, as its CLI")
    for models in sets:
        sizes = f"target {parameters(models.target):.2f}M, drafter {parameters(models.draft):.2f}M parameters"
        print(f"  {models.name}: {sizes}; {models.about}; {repeats_of(models, args)} pairs per row")
    for line in skipped:
        print(f"  {line}")
    print(f"prompt: {args.prompt!r}")


def main(args: argparse.Namespace, models_root: Path) -> None:
    sets: list[ModelSet] = []
    skipped: list[str] = []
    for name in args.sets.split(","):
        if name == "smallest":
            sets.append(smallest_models(models_root))
        elif name == "demo":
            sets.append(demo_models())
        elif name == "smollm2":
            found = smollm2_models(args.smollm2)
            if isinstance(found, ModelSet):
                sets.append(found)
            else:
                skipped.append(f"smollm2: {found}")
        else:
            sys.exit(f"unknown model set {name!r}: choose from smallest, demo, smollm2")
    print_header(sets, skipped, args)
    if not sets:
        return
    threads = args.blas_threads.split(",") if args.blas_threads else [None]
    cells = [Cell(models, mode, t) for models in sets for mode in MODES for t in threads]
    results = run_pairs(cells, args)
    print()
    print_table(results, args)
    print_details(results, args)
    if args.blas_threads:
        print_threads(results, threads, args)
    print(f"\n{len(cells)} rows, {sum(repeats_of(c.models, args) for c in cells)} pairs")
    if args.save:
        raw = [{"row": cell.label(args.k), "threads": cell.threads, **pairs.sides} for cell, pairs in results.items()]
        args.save.write_text(json.dumps(raw))
