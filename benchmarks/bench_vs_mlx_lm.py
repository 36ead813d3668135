"""specplay against mlx-lm's own generation, on the same models in one process.

Measures greedy speculative and target-only tokens/s (the two sides alternate repeat by repeat,
since these machines have slow phases) and acceptance at temperature 1: specplay's lossless
rejection sampling against mlx-lm's exact-match rule. Both sides' tokens/s come from this
script's clock: (tokens after the first) / (last arrival - first arrival) in the consumer loop.

    python benchmarks/bench_vs_mlx_lm.py                  # random models built in a temp dir
    python benchmarks/bench_vs_mlx_lm.py --blas-threads   # again with OPENBLAS_NUM_THREADS=1, 2
    python benchmarks/bench_vs_mlx_lm.py --target DIR --draft DIR
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.sample_utils import make_sampler

from specplay.backends.mlx import MlxBackend, blas, load_mlx_backend
from specplay.backends.mlx.build import (
    llama_config,
    read_texts,
    stdlib_sources,
    train_tokenizer,
    write_model,
    write_perturbed_copy,
)
from specplay.engine.controls import LiveControls
from specplay.engine.events import DoneEvent, RoundEvent, StepEvent
from specplay.engine.loop import Request, SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings

DRAFTER = "near"
DEFAULT_PROMPT = "def main(args):\n    "


@dataclass
class Run:
    """One generation as the consumer saw it."""

    ids: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)  # mlx-lm only
    metrics: dict[str, Any] = field(default_factory=dict)  # specplay only

    def arrive(self, token_id: int, from_draft: bool = False) -> None:
        self.times.append(time.perf_counter())
        self.ids.append(token_id)
        self.from_draft.append(from_draft)

    def tokens_per_s(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def build_models(root: Path) -> tuple[Path, Path]:
    """The random target and its noisy copy; reused when `root` already holds them."""
    if not (root / DRAFTER / "model.safetensors").exists():
        train_tokenizer(read_texts(stdlib_sources(40)), root / "tokenizer", vocab_size=512)
        config = llama_config(384, 6, 512, tie_word_embeddings=False)
        write_model(root / "target", config, root / "tokenizer", seed=0, output_scale=4.0)
        write_perturbed_copy(root / "target", root / DRAFTER, noise=0.1, seed=3)
    return root / "target", root / DRAFTER


class Sides:
    """specplay and mlx-lm over the same loaded weights."""

    def __init__(self, backend: MlxBackend, prompt: str, k: int, max_tokens: int) -> None:
        self.backend, self.prompt, self.k, self.n = backend, prompt, k, max_tokens
        self.engine = SpecEngine(backend)
        self.ids = backend.encode(prompt, raw=True)
        self.target = backend.models["target"].model
        self.draft = backend.models[DRAFTER].model
        # mlx-lm has no ignore_eos: a copy of the tokenizer without EOS ids stands in for it.
        self.tokenizer = copy.copy(backend.tokenizer)
        self.tokenizer.eos_token_ids = ()

    def specplay(self, mode: str, temperature: float = 0.0, seed: int = 0) -> Run:
        settings = SpecSettings(k=self.k, route=DRAFTER, sampling=SamplingParams(temperature=temperature))
        request = Request(self.prompt, tuple(self.ids), mode=mode, seed=seed, max_tokens=self.n, ignore_eos=True)  # type: ignore[arg-type]
        run = Run()
        for event in self.engine.generate(request, LiveControls(settings, self.backend.drafters)):
            if isinstance(event, RoundEvent):
                for token in event.tokens:
                    run.arrive(token.token_id)
            elif isinstance(event, StepEvent):
                run.arrive(event.token.token_id)
            elif isinstance(event, DoneEvent):
                run.metrics = event.metrics
        return run

    def mlx_lm(self, speculative: bool, temperature: float = 0.0, seed: int = 0) -> Run:
        mx.random.seed(seed)
        extra: dict[str, Any] = {"sampler": make_sampler(temp=temperature)}
        if speculative:
            extra.update(draft_model=self.draft, num_draft_tokens=self.k)
        run = Run()
        for response in mlx_lm.stream_generate(self.target, self.tokenizer, self.ids, max_tokens=self.n, **extra):
            run.arrive(response.token, response.from_draft)
        return run


def mlx_lm_acceptance(from_draft: list[bool], k: int, max_tokens: int) -> tuple[float, float]:
    """(accepted / drafted, tokens per round) from mlx-lm's from_draft flags.

    A round yields its accepted drafts then one target token, drafting min(k, tokens left).
    """
    rounds = drafted = accepted = 0
    open_round = False
    for emitted, flag in enumerate(from_draft):
        if not open_round:
            rounds, drafted = rounds + 1, drafted + min(k, max_tokens - emitted)
        accepted += flag
        open_round = flag  # the target's token closes the round
    return accepted / drafted, 1 + accepted / rounds  # counted as specplay's mean_acceptance_length


def alternate(repeats: int, first: Any, second: Any) -> tuple[list[Run], list[Run]]:
    """Each side once as warm-up, then `repeats` pairs, flipping who goes first each time."""
    first(), second()
    a_runs, b_runs = [], []
    for i in range(repeats):
        if i % 2 == 0:
            a_runs.append(first())
            b_runs.append(second())
        else:
            b_runs.append(second())
            a_runs.append(first())
    return a_runs, b_runs


def speed_row(label: str, ours: list[Run], theirs: list[Run]) -> str:
    ratios = [a.tokens_per_s() / b.tokens_per_s() for a, b in zip(ours, theirs, strict=True)]
    ours_tps = statistics.median(r.tokens_per_s() for r in ours)
    theirs_tps = statistics.median(r.tokens_per_s() for r in theirs)
    spread = f"{min(ratios):.2f}..{max(ratios):.2f}"
    return f"{label:<30}{ours_tps:>10.1f}{theirs_tps:>10.1f}{statistics.median(ratios):>10.2f}  {spread}"


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
    print(f"BLAS: {blas_description()}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    for name, loaded in backend.models.items():
        params = sum(v.size for _, v in tree_flatten(loaded.model.parameters()))
        dtype = next(v.dtype for _, v in tree_flatten(loaded.model.parameters()))
        print(f"model {name}: {params / 1e6:.2f}M parameters, {dtype}, from {loaded.path.name}")
    print(f"k={args.k}, max_tokens={args.max_tokens}, repeats={args.repeats}, seeds={args.seeds}")
    print(f"prompt: {args.prompt!r} ({len(backend.encode(args.prompt, raw=True))} tokens)")


def measure(args: argparse.Namespace, target: Path, draft: Path) -> None:
    backend = load_mlx_backend(str(target), [(DRAFTER, str(draft))])
    sides = Sides(backend, args.prompt, args.k, args.max_tokens)
    print_header(backend, args)

    spec_ours, spec_theirs = alternate(
        args.repeats, lambda: sides.specplay("speculative"), lambda: sides.mlx_lm(speculative=True)
    )
    target_ours, target_theirs = alternate(
        args.repeats, lambda: sides.specplay("target"), lambda: sides.mlx_lm(speculative=False)
    )
    print(f"\n{'tokens/s (median)':<30}{'specplay':>10}{'mlx-lm':>10}{'ratio':>10}  spread (min..max)")
    print(speed_row(f"greedy speculative, k={args.k}", spec_ours, spec_theirs))
    print(speed_row("target only", target_ours, target_theirs))

    same_spec = all(a.ids == b.ids for a, b in zip(spec_ours, spec_theirs, strict=True))
    same_target = all(a.ids == b.ids for a, b in zip(target_ours, target_theirs, strict=True))
    same_across = spec_ours[0].ids == target_ours[0].ids
    print(f"identical greedy ids: speculative {same_spec}, target-only {same_target}, spec == target {same_across}")
    greedy_theirs = mlx_lm_acceptance(spec_theirs[0].from_draft, args.k, args.max_tokens)
    metrics = spec_ours[0].metrics
    print(
        f"greedy acceptance rate: specplay {metrics['draft_acceptance_rate']:.3f}, mlx-lm {greedy_theirs[0]:.3f}; "
        f"tokens per round: specplay {metrics['mean_acceptance_length']:.2f}, mlx-lm {greedy_theirs[1]:.2f}"
    )
    split = {
        key: statistics.median(r.metrics[key] / r.metrics["num_spec_steps"] for r in spec_ours)
        for key in ("draft_ms", "verify_ms", "overhead_ms")
    }
    print("specplay per round (median): " + ", ".join(f"{key} {value:.2f}" for key, value in split.items()))
    print_acceptance(sides, args)


def print_acceptance(sides: Sides, args: argparse.Namespace) -> None:
    ours = [sides.specplay("speculative", temperature=1.0, seed=s).metrics for s in range(args.seeds)]
    theirs = [
        mlx_lm_acceptance(sides.mlx_lm(speculative=True, temperature=1.0, seed=s).from_draft, args.k, args.max_tokens)
        for s in range(args.seeds)
    ]
    rate_ours = [m["draft_acceptance_rate"] for m in ours]
    length_ours = [m["mean_acceptance_length"] for m in ours]
    rate_theirs, length_theirs = zip(*theirs, strict=True)
    title = f"temperature 1, k={args.k}, {args.seeds} seeds"
    print(f"\n{title:<30}{'specplay (lossless)':>22}{'mlx-lm (exact match)':>22}")
    print(f"{'draft acceptance rate':<30}{_mean_range(rate_ours):>22}{_mean_range(rate_theirs):>22}")
    print(f"{'tokens per round':<30}{_mean_range(length_ours):>22}{_mean_range(length_theirs):>22}")


def _mean_range(values: Any) -> str:
    values = list(values)
    return f"{statistics.mean(values):.3f} ({min(values):.2f}..{max(values):.2f})"


def rerun_per_blas_thread_count(args: argparse.Namespace, target: Path, draft: Path) -> None:
    """OpenBLAS reads its thread count when it loads, so each setting runs in a fresh process."""
    passed = ["--target", str(target), "--draft", str(draft), "--k", str(args.k), "--max-tokens", str(args.max_tokens)]
    passed += ["--repeats", str(args.repeats), "--seeds", str(args.seeds), "--prompt", args.prompt]
    for threads in ("1", "2"):
        print(f"\n===== OPENBLAS_NUM_THREADS={threads} =====", flush=True)
        env = dict(os.environ, OPENBLAS_NUM_THREADS=threads)
        subprocess.run([sys.executable, __file__, *passed], env=env, check=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, help="folder to build the random models in, or reuse (default: temp)")
    parser.add_argument("--target", type=Path, help="an mlx-lm model folder to use as target (with --draft)")
    parser.add_argument("--draft", type=Path, help="an mlx-lm model folder sharing the target's tokenizer")
    parser.add_argument("--k", type=int, default=4, help="draft tokens per round (default 4)")
    parser.add_argument("--max-tokens", type=int, default=200, help="tokens per generation (default 200)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per side (default 5)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds for the temperature-1 acceptance (default 5)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--blas-threads", action="store_true", help="rerun with OPENBLAS_NUM_THREADS=1 and 2")
    args = parser.parse_args()
    if (args.target is None) != (args.draft is None):
        parser.error("--target and --draft go together")
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="specplay-bench-") as tmp:
        target, draft = (args.target, args.draft) if args.target else build_models(args.models or Path(tmp))
        if args.blas_threads:
            rerun_per_blas_thread_count(args, target, draft)
        else:
            measure(args, target, draft)


if __name__ == "__main__":
    main()
