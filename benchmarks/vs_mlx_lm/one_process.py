"""specplay against mlx-lm in one process: both sides on the same loaded models, alternating
repeat by repeat, and acceptance at temperature 1 (the default mode of `python -m benchmarks.vs_mlx_lm`)."""

from __future__ import annotations

import argparse
import copy
import ctypes
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.sample_utils import make_sampler

from specplay.backends.mlx import MlxBackend, blas, load_mlx_backend
from specplay.engine.events import DoneEvent, RoundEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import Mode, SamplingParams, SpecSettings
from specplay.train import model_files

DRAFTER = "near"
DEFAULT_PROMPT = "def main(args):\n    "
WARMUP_TOKENS = 32  # enough to allocate caches and buffers once per side


@dataclass
class Run:
    """One generation as the consumer saw it."""

    ids: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)  # mlx-lm only
    metrics: dict[str, Any] = field(default_factory=dict)  # specplay only
    cpu_s: float = 0.0  # process CPU time, all threads: shows BLAS threads spinning

    def arrive(self, token_id: int, from_draft: bool = False) -> None:
        self.times.append(time.perf_counter())
        self.ids.append(token_id)
        self.from_draft.append(from_draft)

    def tokens_per_s(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def build_models(root: Path) -> tuple[Path, Path]:
    """The random target and its noisy copy; reused when `root` already holds them."""
    if not (root / DRAFTER / "model.safetensors").exists():
        model_files.train_tokenizer(
            model_files.read_texts(model_files.stdlib_sources(40)), root / "tokenizer", vocab_size=512
        )
        config = model_files.llama_config(384, 6, 512, tie_word_embeddings=False)
        model_files.write_model(root / "target", config, root / "tokenizer", seed=0, output_scale=4.0)
        model_files.write_perturbed_copy(root / "target", root / DRAFTER, noise=0.1, seed=3)
    return root / "target", root / DRAFTER


class Sides:
    """specplay and mlx-lm over the same loaded weights, each returning a timed Run."""

    def __init__(self, backend: MlxBackend, prompt: str, k: int) -> None:
        self.backend, self.prompt, self.k = backend, prompt, k
        self.engine = SpecEngine(backend)
        self.ids = backend.encode(prompt, raw=True)
        self.target = backend.models["target"].model
        self.draft = backend.models[DRAFTER].model
        # mlx-lm has no ignore_eos: a copy of the tokenizer without EOS ids stands in for it.
        self.tokenizer = copy.copy(backend.tokenizer)
        self.tokenizer.eos_token_ids = ()

    def specplay(self, mode: Mode, n: int, temperature: float = 0.0, seed: int = 0) -> Run:
        settings = SpecSettings(k=self.k, route=DRAFTER, sampling=SamplingParams(temperature=temperature))
        request = Request(self.prompt, tuple(self.ids), mode=mode, seed=seed, max_tokens=n, ignore_eos=True)
        run, cpu = Run(), time.process_time()
        for event in self.engine.generate(request, LiveControls(settings, self.backend.drafters)):
            if isinstance(event, RoundEvent):
                for token in event.tokens:
                    run.arrive(token.token_id)
            elif isinstance(event, StepEvent):
                run.arrive(event.token.token_id)
            elif isinstance(event, DoneEvent):
                run.metrics = event.metrics
        run.cpu_s = time.process_time() - cpu
        return run

    def mlx_lm(self, speculative: bool, n: int, temperature: float = 0.0, seed: int = 0) -> Run:
        mx.random.seed(seed)
        extra: dict[str, Any] = {"sampler": make_sampler(temp=temperature)}
        if speculative:
            extra.update(draft_model=self.draft, num_draft_tokens=self.k)
        run, cpu = Run(), time.process_time()
        for response in mlx_lm.stream_generate(self.target, self.tokenizer, self.ids, max_tokens=n, **extra):
            run.arrive(response.token, response.from_draft)
        run.cpu_s = time.process_time() - cpu
        return run


def mlx_lm_acceptance(from_draft: list[bool], k: int) -> tuple[float, float]:
    """(accepted / drafted, tokens per round) from mlx-lm's from_draft flags.

    A round yields its accepted drafts then one target token, drafting min(k, tokens left).
    """
    rounds = drafted = accepted = 0
    open_round = False
    for emitted, flag in enumerate(from_draft):
        if not open_round:
            rounds, drafted = rounds + 1, drafted + min(k, len(from_draft) - emitted)
        accepted += flag
        open_round = flag  # the target's token closes the round
    return accepted / drafted, 1 + accepted / rounds  # counted as specplay's mean_acceptance_length


def alternate(repeats: int, n: int, ours: Callable[[int], Run], theirs: Callable[[int], Run]) -> list[list[Run]]:
    """A short warm-up of each side, then `repeats` pairs of n tokens, flipping who goes first."""
    ours(WARMUP_TOKENS), theirs(WARMUP_TOKENS)
    runs: list[list[Run]] = [[], []]
    for i in range(repeats):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            runs[side].append((ours, theirs)[side](n))
    return runs


def speed_row(label: str, ours: list[Run], theirs: list[Run]) -> str:
    ratios = [a.tokens_per_s() / b.tokens_per_s() for a, b in zip(ours, theirs, strict=True)]
    cells = [statistics.median(r.tokens_per_s() for r in side) for side in (ours, theirs)]
    cells += [statistics.median(1000 * r.cpu_s / len(r.ids) for r in side) for side in (ours, theirs)]
    spread = f"{min(ratios):.2f}..{max(ratios):.2f}"
    return f"{label:<28}" + "".join(f"{c:>10.1f}" for c in cells) + f"{statistics.median(ratios):>8.2f}  {spread}"


def blas_description() -> str:
    if blas.OPENBLAS_PATH is None:
        return "reference BLAS (no OpenBLAS preloaded)"
    lib = ctypes.CDLL(blas.OPENBLAS_PATH)
    lib.openblas_get_config.restype = ctypes.c_char_p
    threads = lib.openblas_get_num_threads()
    return f"{blas.OPENBLAS_PATH} ({lib.openblas_get_config().decode()}), {threads} thread(s)"


def print_header(backend: MlxBackend, args: argparse.Namespace) -> None:
    from importlib.metadata import version

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    versions = f"mlx {mx.__version__}, mlx-lm {version('mlx-lm')}"
    print(f"python {platform.python_version()}, {versions}, device {mx.default_device()}")
    print(f"BLAS: {blas_description()}; threads: {blas.THREADS_CHOSEN}")
    for name, loaded in backend.models.items():
        params = sum(v.size for _, v in tree_flatten(loaded.model.parameters()))
        dtype = next(v.dtype for _, v in tree_flatten(loaded.model.parameters()))
        print(f"model {name}: {params / 1e6:.2f}M parameters, {dtype}, from {loaded.path.name}")
    print(f"k={args.k}, max_tokens={args.max_tokens}, repeats={args.repeats}, warm-up {WARMUP_TOKENS} tokens per side")
    print(f"prompt: {args.prompt!r} ({len(backend.encode(args.prompt, raw=True))} tokens)")


def measure(args: argparse.Namespace, target: Path, draft: Path) -> None:
    backend = load_mlx_backend(str(target), [(DRAFTER, str(draft))])
    sides = Sides(backend, args.prompt, args.k)
    print_header(backend, args)

    n, k = args.max_tokens, args.k
    speculative_runs = alternate(args.repeats, n, partial(sides.specplay, "speculative"), partial(sides.mlx_lm, True))
    target_only = alternate(args.repeats, n, partial(sides.specplay, "target"), partial(sides.mlx_lm, False))
    print(f"\n{'median over repeats':<28}{'specplay':>10}{'mlx-lm':>10}{'specplay':>10}{'mlx-lm':>10}")
    print(f"{'':<28}{'tokens/s':>20}{'CPU ms/token':>20}{'ratio':>8}  spread (min..max)")
    print(speed_row(f"greedy speculative, k={k}", *speculative_runs))
    print(speed_row("target only", *target_only))
    if args.control:  # the same side twice, alternated as above: the spread equal sides read
        side = {"specplay": sides.specplay, "mlx-lm": sides.mlx_lm}[args.control]
        flag = {"specplay": ("speculative", "target"), "mlx-lm": (True, False)}[args.control]
        for label, arg in zip((f"A/A speculative, k={k}", "A/A target only"), flag, strict=True):
            print(speed_row(f"{label}", *alternate(args.repeats, n, partial(side, arg), partial(side, arg))))
        print(f"(A/A: {args.control} in both columns; its ratio is this harness's noise)")

    same = [all(a.ids == b.ids for a, b in zip(*runs, strict=True)) for runs in (speculative_runs, target_only)]
    print(f"identical greedy ids: speculative {same[0]}, target-only {same[1]}, ", end="")
    print(f"speculative == target-only {speculative_runs[0][0].ids == target_only[0][0].ids}")
    theirs = mlx_lm_acceptance(speculative_runs[1][0].from_draft, k)
    ours = speculative_runs[0][0].metrics
    print(
        f"greedy acceptance rate: specplay {ours['draft_acceptance_rate']:.3f}, mlx-lm {theirs[0]:.3f}; "
        f"tokens per round: specplay {ours['mean_acceptance_length']:.2f}, mlx-lm {theirs[1]:.2f}"
    )
    per_round = [
        f"{key} {statistics.median(r.metrics[key] / r.metrics['num_spec_steps'] for r in speculative_runs[0]):.2f}"
        for key in ("draft_ms", "verify_ms", "overhead_ms")
    ]
    print("specplay per round (median): " + ", ".join(per_round))
    print_acceptance(sides, args)


def print_acceptance(sides: Sides, args: argparse.Namespace) -> None:
    n, seeds = args.accept_tokens, range(args.seeds)
    ours = [sides.specplay("speculative", n, temperature=1.0, seed=s).metrics for s in seeds]
    theirs = [mlx_lm_acceptance(sides.mlx_lm(True, n, temperature=1.0, seed=s).from_draft, args.k) for s in seeds]
    rates = ([m["draft_acceptance_rate"] for m in ours], [rate for rate, _ in theirs])
    lengths = ([m["mean_acceptance_length"] for m in ours], [length for _, length in theirs])
    title = f"temp 1, k={args.k}, {n} tokens x {args.seeds} seeds"
    print(f"\n{title:<34}{'specplay (lossless)':>22}{'mlx-lm (exact match)':>22}")
    print(f"{'draft acceptance rate':<34}{_mean_range(rates[0]):>22}{_mean_range(rates[1]):>22}")
    print(f"{'tokens per round':<34}{_mean_range(lengths[0]):>22}{_mean_range(lengths[1]):>22}")


def _mean_range(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ({min(values):.2f}..{max(values):.2f})"
