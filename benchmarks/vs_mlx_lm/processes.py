"""`python -m benchmarks.vs_mlx_lm --processes`: specplay against mlx-lm, each side in a process of its own.

In one process the two sides share a heap, BLAS threads and a warm allocator, and whichever runs
second inherits the first's state; here each side runs in its own interpreter (the worker,
worker.py). The two processes of a pair load, warm up, then generate in turns
of a few tenths of a second each, alternating turn by turn (and who starts), so a phase of the
machine, which here lasts seconds and moves speeds by a fifth, falls on both sides alike. Turns
are timed rather than counted in tokens, so every model set's turns last alike (16 tokens were
0.08 s on the smallest models and 1.5 s on SmolLM2). Each turn resumes after the other process
has had the CPUs and their caches, a cost a run alone never pays, spread over more work the
longer the turn. Each generation pair gives a ratio (specplay / mlx-lm tokens/s over the
generation's turns); a row's ratio is their median, over several fresh process pairs, with their
interquartile range.

With --control SIDE both processes of a pair run SIDE (the columns keep their names, the
"specplay" one being the first process): an A/A run, whose ratios show how far two equal sides
read apart in this harness on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx

from specplay.backends.mlx import blas
from specplay.bench.stats import quartiles
from specplay.train import model_files

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: the worker runs as `python -m benchmarks.vs_mlx_lm.worker` from its import path."""
PROMPT = 'import os\nimport sys\n\n\ndef parse_args(argv):\n    """Parse the command line arguments."""\n'
MODES = ("speculative", "target")
SPECPLAY_PATHS = {
    "cli": "as `specplay run` (its runner records each lane; events read on the main thread, where the engine runs)",
    "engine": "the engine's events consumed bare on the main thread, where it runs",
    "backend": "the MLX backend's draft, verify and commit, accepted greedily in a loop of the benchmark's (no engine)",
}
SIDES = ("specplay", "mlx-lm")
MIN_PAIRS = 3
"""Fewer generation pairs have no spread worth the name."""
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
    """Process pairs per row by default: slow models cost more per generation."""


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
class Generation:
    """One side's generation: its turns as (tokens, seconds), and what it made (the worker's
    Generated)."""

    turns: list[tuple[int, float]] = field(default_factory=list)
    made: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return sum(tokens for tokens, _ in self.turns) / sum(seconds for _, seconds in self.turns)


@dataclass
class Pairs:
    """A row's generations, side by side in the order they ran; `process` numbers the process pair
    that ran each."""

    sides: dict[str, list[Generation]] = field(default_factory=lambda: {side: [] for side in SIDES})
    process: list[int] = field(default_factory=list)

    def tokens_per_s(self, side: str) -> list[float]:
        return [generation.tokens_per_s for generation in self.sides[side]]

    def ratios(self) -> list[float]:
        """specplay / mlx-lm per generation pair."""
        return [a / b for a, b in zip(self.tokens_per_s("specplay"), self.tokens_per_s("mlx-lm"), strict=True)]

    def turn_ratios(self) -> list[float]:
        """specplay / mlx-lm per pair of adjacent turns (a generation's last turn may be short or empty)."""
        out = []
        for ours, theirs in zip(self.sides["specplay"], self.sides["mlx-lm"], strict=True):
            for (a, a_s), (b, b_s) in zip(ours.turns, theirs.turns, strict=False):
                if a and b:
                    out.append((a / a_s) / (b / b_s))
        return out

    def process_ratios(self) -> list[float]:
        """The median generation ratio of each process pair: how far fresh processes differ."""
        ratios = self.ratios()
        return [
            statistics.median(r for r, p in zip(ratios, self.process, strict=True) if p == process)
            for process in sorted(set(self.process))
        ]


# ---------------------------------------------------------------- the models


def truncated_copy(source: Path, out: Path, layers: int) -> None:
    """`source`'s first `layers` layers with its embedding, final norm and head: a smaller model
    of the same family and tokenizer, as a folder any mlx-lm program loads."""
    weights = mx.load(str(source / "model.safetensors"))
    kept = {name: value for name, value in weights.items() if model_files.layer_of(name) < layers}
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), kept, metadata={"format": "mlx"})
    config = json.loads((source / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=layers), indent=2))
    for name in model_files.TOKENIZER_FILES:
        shutil.copyfile(source / name, out / name)


def smallest_models(root: Path) -> ModelSet:
    """A 0.92M llama target (width 64, 13 layers) and its first layer as a 0.13M drafter; reused
    when `root` already holds them."""
    target, draft = root / "smallest-target", root / "smallest-draft"
    if not (draft / "model.safetensors").exists():
        model_files.train_tokenizer(
            model_files.read_texts(model_files.stdlib_sources(40)), root / "tokenizer", vocab_size=512
        )
        config = model_files.llama_config(64, 13, 512, tie_word_embeddings=False)
        model_files.write_model(target, config, root / "tokenizer", seed=0, output_scale=4.0)
        model_files.damp_layers(target, 1, SMALLEST_DAMPING)
        truncated_copy(target, draft, 1)
    about = (
        f"random llama, width 64, 13 layers, layers 2-13 damped to {SMALLEST_DAMPING}; "
        "drafter: its first layer with its embedding and head"
    )
    return ModelSet("smallest", about, target, draft, repeats=3)


def demo_models() -> ModelSet:
    from specplay.config.demo import demo_model_paths

    target, drafters = demo_model_paths()
    about = "the shipped demo target; drafter `base` (the one --route auto sends code to)"
    return ModelSet("demo", about, target, drafters["base"], repeats=3)


def smollm2_models(source: str) -> ModelSet | str:
    """SmolLM2 drafting for itself, or why the row is skipped. mlx-lm's speculative decoding takes
    a model drafter only (no prompt lookup, no early exit), and a cut-down SmolLM2 agrees about 1%
    of the time at a quarter of a target step per token; the target itself as drafter is the
    cheapest model both sides can run, and every round commits k + 1 tokens."""
    from specplay.backends.mlx.loading import resolve_model_path
    from specplay.drafters import parse_model
    from specplay.errors import SpecplayError

    try:
        folder = resolve_model_path(parse_model("target", "target", source, "--smollm2").location)
    except SpecplayError as error:
        return f"skipped: {error}"
    about = "SmolLM2-135M-Instruct (fp32 on CPUs); drafter: the same model loaded again (all drafts accepted)"
    return ModelSet("smollm2", about, folder, folder, repeats=2)


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


class Worker:
    """One side's worker process: loaded and warmed up, then answering turns."""

    def __init__(self, cell: Cell, side: str, args: argparse.Namespace) -> None:
        runs = args.control or side  # an A/A run puts one side in both processes
        self.label = f"{runs} worker on {cell.label(args.k)}"
        command = [sys.executable, "-m", "benchmarks.vs_mlx_lm.worker", "--side", runs, "--mode", cell.mode]
        command += ["--target", str(cell.models.target), "--draft", str(cell.models.draft), "--k", str(args.k)]
        command += ["--max-tokens", str(args.max_tokens)]
        command += ["--warmup-tokens", str(args.warmup_tokens), "--prompt", args.prompt, "--path", args.specplay_path]
        threads = cell.threads or (args.mlx_lm_threads if runs == "mlx-lm" else None)
        env = dict(os.environ, **({"OPENBLAS_NUM_THREADS": threads} if threads else {}))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close(); a pipe could fill)
        self.process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            self.stderr.seek(0)
            sys.exit(f"{self.label} failed:\n{self.stderr.read()[-3000:]}")
        return json.loads(line)

    def turn(self, seconds: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"seconds": seconds}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        """An empty line ends the worker; one that already died is only waited for."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write("\n")
            self.process.stdin.close()
        self.process.wait()
        self.stderr.close()


def run_process_pair(cell: Cell, process: int, pairs: Pairs, args: argparse.Namespace) -> None:
    """A fresh process per side, started one after the other (which first alternates with the
    pair, as the second one loads while the first waits); `args.generations` generations in
    alternating turns."""
    start_order = SIDES if process % 2 == 0 else SIDES[::-1]
    workers = {side: Worker(cell, side, args) for side in start_order}
    if process == 0:  # what each side's OpenBLAS runs with, as the process itself reports it
        threads = ", ".join(f"{side} {workers[side].ready.get('blas_threads')}" for side in SIDES)
        print(f"  {cell.label(args.k)}: BLAS threads {threads}", file=sys.stderr, flush=True)
    try:
        for generation in range(args.generations):
            made = {side: Generation() for side in SIDES}
            ended: set[str] = set()
            # Strictly in turn, so every turn resumes after the other side's: a side resuming after
            # its own turn runs faster, and turns would not be alike. Who starts alternates.
            order = SIDES if (generation + process) % 2 == 0 else SIDES[::-1]
            while len(ended) < len(SIDES):
                for side in (side for side in order if side not in ended):
                    answer = workers[side].turn(args.turn_s)
                    made[side].turns.append((answer["tokens"], answer["seconds"]))
                    if answer["ended"]:
                        made[side].made = answer["generated"]
                        ended.add(side)
            for side in SIDES:
                pairs.sides[side].append(made[side])
            pairs.process.append(process)
    finally:
        for worker in workers.values():
            worker.close()


def run_pairs(cells: Sequence[Cell], args: argparse.Namespace) -> dict[Cell, Pairs]:
    """Repeat-major: every row gets a process pair per repeat, so the rows share the machine's phases."""
    results = {cell: Pairs() for cell in cells}
    for repeat in range(max(repeats_of(cell.models, args) for cell in cells)):
        for cell in cells:
            if repeat >= repeats_of(cell.models, args):
                continue
            pairs = results[cell]
            run_process_pair(cell, repeat, pairs, args)
            recent = pairs.ratios()[-args.generations :]
            speeds = " ".join(f"{side} {pairs.tokens_per_s(side)[-1]:.1f}" for side in SIDES)
            ratios = " ".join(f"{r:.3f}" for r in recent)
            line = f"  [{repeat + 1}] {cell.label(args.k)}: {speeds} tokens/s; ratios {ratios}"
            print(line, file=sys.stderr, flush=True)
    return results


def repeats_of(models: ModelSet, args: argparse.Namespace) -> int:
    return args.repeats or models.repeats


# ---------------------------------------------------------------- the report


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
    runs = [generation.made["ids"] for side in SIDES for generation in pairs.sides[side]]
    first = runs[0]
    for ids in runs[1:]:
        if ids != first:
            at = next(
                (i for i, (a, b) in enumerate(zip(first, ids, strict=False)) if a != b), min(len(first), len(ids))
            )
            return f"no (token {at})"
    return "yes"


def print_table(results: dict[Cell, Pairs], args: argparse.Namespace) -> None:
    head = ["", "specplay", "mlx-lm", "ratio", "IQR", "min..max", ">1", "1 outside IQR", "turns"]
    head += ["processes", "same ids"]
    rows = [head, ["", "tokens/s", "tokens/s", "median", "", "", "", "", "median", "min..max", ""]]
    for cell, pairs in results.items():
        speeds = [f"{statistics.median(pairs.tokens_per_s(side)):.1f}" for side in SIDES]
        by_process = pairs.process_ratios()
        turns = f"{statistics.median(pairs.turn_ratios()):.3f}"
        spread = f"{min(by_process):.2f}..{max(by_process):.2f}"
        rows.append([cell.label(args.k), *speeds, *ratio_cells(pairs.ratios()), turns, spread, same_ids(pairs)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        cells = [cell.rjust(width) for cell, width in zip(row, widths, strict=True)]
        print("  ".join([row[0].ljust(widths[0]), *cells[1:]]))
    print(
        "ratio: median over generation pairs of specplay/mlx-lm tokens/s; IQR: theirs; '1 outside IQR' yes: the "
        "spread is smaller than the ratio's distance from 1; turns: the median over pairs of adjacent turns; "
        "processes: each process pair's median"
    )


def print_details(results: dict[Cell, Pairs], args: argparse.Namespace) -> None:
    """Acceptance (equal on both sides when greedy ids are), specplay's own per-round split, and
    greedy speculative output against target-only output per model set."""
    for cell, pairs in results.items():
        if cell.mode == "speculative":
            print(acceptance_line(cell, pairs, args.k))
    outputs: dict[str, dict[str, list[int]]] = {}
    for cell, pairs in results.items():
        outputs.setdefault(cell.models.name, {})[cell.mode] = pairs.sides["specplay"][0].made["ids"]
    for name, modes in outputs.items():
        if len(modes) == 2:
            print(f"{name}: greedy speculative ids == target-only ids: {modes['speculative'] == modes['target']}")


def acceptance_line(cell: Cell, pairs: Pairs, k: int) -> str:
    ours, theirs = pairs.sides["specplay"][0].made, pairs.sides["mlx-lm"][0].made
    split = ", ".join(
        f"{key} {statistics.median(g.made['per_round_ms'][key] for g in pairs.sides['specplay']):.2f}"
        for key in ours["per_round_ms"]
    )
    own = f"; specplay per round (ms): {split}" if split else ""  # none where a control runs mlx-lm twice
    return (
        f"{cell.label(k)}: acceptance specplay {ours['acceptance']:.3f}, mlx-lm {theirs['acceptance']:.3f}; "
        f"tokens per round {ours['tokens_per_round']:.2f} / {theirs['tokens_per_round']:.2f}{own}"
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
    print(f"BLAS: {blas.OPENBLAS_PATH or 'reference BLAS'}; threads in this process: {blas.THREADS_CHOSEN}")
    if args.mlx_lm_threads and not args.blas_threads:
        print(f"threads: mlx-lm's processes OPENBLAS_NUM_THREADS={args.mlx_lm_threads}; specplay's its own choice")
    print("MLX's CPU backend has no thread setting: each stream runs its work on one thread of its own")
    print(
        f"process mode: each side in its own process ({args.warmup_tokens}-token warm-up), {args.generations} "
        f"generations of {args.max_tokens} tokens per process pair, the sides alternating turns of "
        f"{args.turn_s:g} s; greedy, k={args.k}, EOS ignored, same fp32 weights and OpenBLAS on both sides"
    )
    print(f"specplay: {SPECPLAY_PATHS[args.specplay_path]}; mlx-lm: stream_generate on the main thread, as its CLI")
    if args.control:
        print(
            f"CONTROL: both processes of each pair run {args.control}; the 'specplay' column is the first of "
            "them, and the ratios are what equal sides read in this harness"
        )
    for models in sets:
        sizes = f"target {parameters(models.target):.2f}M, drafter {parameters(models.draft):.2f}M parameters"
        print(f"  {models.name}: {sizes}; {models.about}; {repeats_of(models, args)} process pairs per row")
    for line in skipped:
        print(f"  {line}")
    print(f"prompt: {args.prompt!r}")


def model_sets(names: str, models_root: Path, smollm2: str) -> tuple[list[ModelSet], list[str]]:
    """The comma-separated model sets named, and a line for each one skipped (SmolLM2 not fetched)."""
    sets: list[ModelSet] = []
    skipped: list[str] = []
    for name in names.split(","):
        if name == "smallest":
            sets.append(smallest_models(models_root))
        elif name == "demo":
            sets.append(demo_models())
        elif name == "smollm2":
            found = smollm2_models(smollm2)
            if isinstance(found, ModelSet):
                sets.append(found)
            else:
                skipped.append(f"smollm2: {found}")
        else:
            sys.exit(f"unknown model set {name!r}: choose from smallest, demo, smollm2")
    return sets, skipped


def main(args: argparse.Namespace, models_root: Path) -> None:
    sets, skipped = model_sets(args.sets, models_root, args.smollm2)
    print_header(sets, skipped, args)
    if not sets:
        return
    threads = args.blas_threads.split(",") if args.blas_threads else [None]
    modes = args.modes.split(",")
    if unknown := set(modes) - set(MODES):
        sys.exit(f"unknown mode {sorted(unknown)[0]!r}: choose from {', '.join(MODES)}")
    cells = [Cell(models, mode, t) for models in sets for mode in modes for t in threads]
    results = run_pairs(cells, args)
    print()
    print_table(results, args)
    print_details(results, args)
    if args.blas_threads:
        print_threads(results, threads, args)
    pairs = sum(repeats_of(c.models, args) for c in cells)
    print(f"\n{len(cells)} rows, {pairs} process pairs, {pairs * args.generations} generation pairs")
    if args.save:
        raw = [
            {"row": cell.label(args.k), "threads": cell.threads, "process": pairs.process}
            | {side: [asdict(generation) for generation in pairs.sides[side]] for side in SIDES}
            for cell, pairs in results.items()
        ]
        args.save.write_text(json.dumps(raw))
