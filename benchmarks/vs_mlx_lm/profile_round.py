"""`python -m benchmarks.vs_mlx_lm --profile`: where a round's time goes, specplay beside mlx-lm.

Two views of the smallest models (processes.py), greedy, k = 3:

- Direct timings. A profiler samples the Python thread but cannot tell building a graph from
  queueing it or from waiting for it, so this module wraps the calls that mark those boundaries
  (mx.eval, mx.async_eval, .tolist/.item, the models' forward, draft/verify/commit, acceptance,
  event and detokenizer calls) with clocks that count each category's exclusive time, for both
  sides in one process on the same weights. It also reads the CPU time of MLX's own threads (the
  stream's worker and OpenBLAS's), where the compute runs.
- A sampling profile (py-spy --native, when installed): a child process runs specplay's timed
  generations and py-spy samples its Python thread, native MLX frames included.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.sample_utils import make_sampler

from specplay.backends.mlx import MlxBackend, blas, generation, load_mlx_backend
from specplay.engine import loop, metrics
from specplay.engine.events import DoneEvent, RoundEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings

DRAFTER = "draft"
MLX_LM_GENERATE = sys.modules[mlx_lm.stream_generate.__module__]  # the module: mlx_lm.generate is also a function
CATEGORIES = {
    "model": "graph building: the models' forward (Python)",
    "graph": "graph building: sampling, acceptance math, glue",
    "dispatch": "MLX dispatch (eval/async_eval until queued)*",
    "wait": "waiting for compute (eval)",
    "transfer": "host transfer (.tolist, .item)",
    "rewind": "cache rewind (commit)",
    "events": "acceptance and event construction",
    "detok": "detokenization",
    "rest": "the rest (generator loop, draws, controls)",
}


# ---------------------------------------------------------------- exclusive clocks


class Ledger:
    """Exclusive wall time per category: time inside a wrapped call, less its wrapped callees."""

    def __init__(self) -> None:
        self.totals: defaultdict[str, float] = defaultdict(float)
        self._stack: list[list[Any]] = []  # [category, start, time in wrapped callees]

    @contextmanager
    def timing(self, category: str) -> Iterator[None]:
        frame = [category, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - frame[1]
            self._stack.pop()
            self.totals[category] += elapsed - frame[2]
            if self._stack:
                self._stack[-1][2] += elapsed

    def wrap(self, category: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.timing(category):
                return fn(*args, **kwargs)

        return timed

    def wrap_generator(self, category: str, make: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        """Each step of the generator `make` returns is timed (its own code: `category`)."""

        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            inner = make(*args, **kwargs)
            while True:
                with self.timing(category):
                    try:
                        item = next(inner)
                    except StopIteration as stop:
                        return stop.value
                yield item

        return timed


class Patches:
    """Attributes replaced for a measurement and put back after it."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any, bool]] = []
        self.missing: list[str] = []

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        if not hasattr(owner, name):  # a name the code under test no longer has
            self.missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return
        own = name in getattr(owner, "__dict__", {})
        original = owner.__dict__[name] if own else getattr(owner, name)  # a property stays a property
        self._saved.append((owner, name, original, own))
        setattr(owner, name, make(original))

    def undo(self) -> None:
        for owner, name, original, own in reversed(self._saved):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # inherited: uncover the base class's again
        self._saved.clear()


def instrument(ledger: Ledger, model_classes: set[type], detokenizer_class: type) -> Patches:
    """Wrap the boundaries between the categories, for both sides at once."""
    patches = Patches()
    wrap = ledger.wrap

    queue, wait = ledger.wrap("dispatch", mx.async_eval), ledger.wrap("wait", mx.eval)

    def split_eval(original: Callable[..., Any]) -> Callable[..., Any]:
        # Queue first, then wait: eval's own time splits into dispatch and waiting for compute.
        return lambda *arrays: (queue(*arrays), wait(*arrays))[1]

    def read(original: Callable[..., Any]) -> Callable[..., Any]:
        # .tolist() on an array not yet computed evaluates it first: that part is not transfer.
        transfer = ledger.wrap("transfer", original)
        return lambda array: (queue(array), wait(array), transfer(array))[2]

    patches.replace(mx, "eval", split_eval)
    patches.replace(mx, "async_eval", lambda f: wrap("dispatch", f))
    for name in ("tolist", "item"):
        patches.replace(mx.array, name, read)
    for cls in model_classes:
        patches.replace(cls, "__call__", lambda f: wrap("model", f))
    for name in ("draft", "verify", "counterfactual"):
        patches.replace(generation.MlxGeneration, name, lambda f: wrap("graph", f))
    patches.replace(generation.MlxGeneration, "_generate", lambda f: ledger.wrap_generator("graph", f))
    patches.replace(generation.MlxGeneration, "commit", lambda f: wrap("rewind", f))
    for name in ("_judge", "_emit"):
        patches.replace(loop._Run, name, lambda f: wrap("events", f))
    for name in ("RoundEvent", "StepEvent"):
        patches.replace(loop, name, lambda f: wrap("events", f))
    for name in ("add_round", "add_tokens"):
        patches.replace(metrics.Metrics, name, lambda f: wrap("events", f))
    for name in ("add_token", "finalize"):
        patches.replace(detokenizer_class, name, lambda f: wrap("detok", f))
    patches.replace(detokenizer_class, "last_segment", lambda p: property(wrap("detok", p.fget)))
    # mlx-lm's generators: their own code is its sampling and glue; stream_generate's is events.
    for name in ("generate_step", "speculative_generate_step"):
        patches.replace(MLX_LM_GENERATE, name, lambda f: ledger.wrap_generator("graph", f))
    patches.replace(mlx_lm, "stream_generate", lambda f: ledger.wrap_generator("events", f))
    return patches


def pending_ops(*trees: Any) -> int:
    """Primitives MLX has yet to run to evaluate these arrays (or trees of arrays): the graph
    export stops at arrays already evaluated or queued."""
    arrays = [leaf for _, leaf in tree_flatten(list(trees)) if isinstance(leaf, mx.array)]
    if not arrays:
        return 0
    dot = io.StringIO()
    mx.export_to_dot(dot, *arrays)
    return dot.getvalue().count("shape=rectangle")


def count_ops(run: Callable[[str, int], tuple[int, int]], mode: str, n: int) -> dict[str, float]:
    """Per round: MLX primitives run, eval/async_eval calls, and reads to the host (.tolist,
    .item). Counted in a pass of its own: exporting the graph costs far more than running it."""
    counts: Counter[str] = Counter()

    def counting(kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*arrays: Any) -> Any:
            counts["ops"] += pending_ops(*arrays)
            counts[kind] += 1
            return original(*arrays)

        return counted

    patches = Patches()
    for name in ("eval", "async_eval"):
        patches.replace(mx, name, lambda f: counting("evals", f))
    for name in ("tolist", "item"):
        patches.replace(mx.array, name, lambda f: counting("reads", f))
    try:
        rounds = run(mode, n)[1]
    finally:
        patches.undo()
    return {kind: counts[kind] / rounds for kind in ("ops", "evals", "reads")}


# ---------------------------------------------------------------- MLX's own threads


def native_thread_cpu_s() -> float | None:
    """CPU seconds of this process's threads that run no Python: MLX's stream workers and
    OpenBLAS's threads, where the compute happens. None where per-thread clocks are unknown."""
    python = {t.native_id for t in threading.enumerate()}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return None
    total = 0.0
    for tid in tids:
        if tid in python:
            continue
        try:
            total += time.clock_gettime((~tid << 3) | 6)  # Linux: the thread's CPU-time clock
        except OSError:
            continue
    return total


# ---------------------------------------------------------------- the two sides


@dataclass
class Profile:
    """Totals over the profiled generations of one side and mode."""

    rounds: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    native_cpu_s: float = 0.0
    categories: Counter[str] = field(default_factory=Counter)
    counts: dict[str, float] = field(default_factory=dict)
    """MLX primitives, eval calls and host reads per round (count_ops)."""

    def per_round_ms(self, seconds: float) -> float:
        return 1000 * seconds / max(self.rounds, 1)


class Sides:
    """Both sides over the same loaded weights, each generation consumed on this thread."""

    def __init__(self, backend: MlxBackend, prompt: str, k: int) -> None:
        self.backend, self.prompt, self.k = backend, prompt, k
        self.engine = loop.SpecEngine(backend)
        self.ids = backend.encode(prompt, raw=True)
        self.tokenizer = _without_eos(backend.tokenizer)

    def specplay(self, mode: str, n: int) -> tuple[int, int]:
        """(tokens, rounds) of one generation through the engine."""
        settings = SpecSettings(k=self.k, route=DRAFTER, sampling=SamplingParams(temperature=0.0))
        request = Request(self.prompt, tuple(self.ids), mode=mode, seed=0, max_tokens=n, ignore_eos=True)
        controls = LiveControls(settings, self.backend.drafters)
        tokens = rounds = 0
        for event in self.engine.generate(request, controls):
            if isinstance(event, RoundEvent):
                tokens, rounds = tokens + len(event.tokens), rounds + 1
            elif isinstance(event, StepEvent):
                tokens, rounds = tokens + 1, rounds + 1
            elif isinstance(event, DoneEvent):
                break
        return tokens, rounds

    def mlx_lm(self, mode: str, n: int) -> tuple[int, int]:
        extra: dict[str, Any] = {"sampler": make_sampler(temp=0.0)}
        if mode == "speculative":
            extra.update(draft_model=self.backend.models[DRAFTER].model, num_draft_tokens=self.k)
        target = self.backend.models["target"].model
        flags = [r.from_draft for r in mlx_lm.stream_generate(target, self.tokenizer, self.ids, max_tokens=n, **extra)]
        # A round ends with the target's own token: every token not from the draft closes one.
        return len(flags), sum(not flag for flag in flags)


def _without_eos(tokenizer: Any) -> Any:
    quiet = copy.copy(tokenizer)
    quiet.eos_token_ids = ()  # mlx-lm has no ignore_eos
    return quiet


def profile_once(run: Callable[[str, int], tuple[int, int]], mode: str, n: int, ledger: Ledger) -> Profile:
    ledger.totals.clear()
    native, start = native_thread_cpu_s(), time.perf_counter()
    tokens, rounds = run(mode, n)
    wall_s = time.perf_counter() - start
    after = native_thread_cpu_s()
    native_cpu_s = after - native if native is not None and after is not None else 0.0
    return Profile(rounds, tokens, wall_s, native_cpu_s, Counter(ledger.totals))


def add(total: Profile, part: Profile) -> None:
    total.rounds += part.rounds
    total.tokens += part.tokens
    total.wall_s += part.wall_s
    total.native_cpu_s += part.native_cpu_s
    total.categories.update(part.categories)


def print_profiles(title: str, profiles: dict[str, Profile]) -> None:
    print(f"\n{title}: ms per round (a round: k drafted + a verify; target-only: one token)")
    print(f"{'':<50}" + "".join(f"{name:>10}" for name in profiles))
    for key, label in CATEGORIES.items():
        cells = []
        for profile in profiles.values():
            seconds = profile.categories.get(key, 0.0)
            if key == "rest":
                seconds = profile.wall_s - sum(v for k, v in profile.categories.items() if k != "rest")
            cells.append(f"{profile.per_round_ms(seconds):>10.3f}")
        print(f"{label:<50}" + "".join(cells))
    rows = {
        "total, wall": lambda p: f"{p.per_round_ms(p.wall_s):>10.3f}",
        "compute: CPU time of MLX's and OpenBLAS's threads": lambda p: f"{p.per_round_ms(p.native_cpu_s):>10.3f}",
        "MLX primitives run per round": lambda p: f"{p.counts.get('ops', 0):>10.1f}",
        "eval/async_eval calls, host reads per round": lambda p: (
            f"{p.counts.get('evals', 0):>5.1f}{p.counts.get('reads', 0):>5.1f}"
        ),
        "tokens per round": lambda p: f"{p.tokens / max(p.rounds, 1):>10.2f}",
        "tokens/s (instrumented)": lambda p: f"{p.tokens / p.wall_s:>10.1f}",
    }
    for label, cell in rows.items():
        print(f"{label:<50}" + "".join(cell(p) for p in profiles.values()))


def measure_direct(sides: Sides, args: argparse.Namespace) -> None:
    """Each side's categories per round, speculative and target-only, the sides alternating."""
    ledger = Ledger()
    models = {type(m.model) for m in sides.backend.models.values()}
    detokenizer_class = type(sides.backend.tokenizer.detokenizer)
    runs = {"specplay": sides.specplay, "mlx-lm": sides.mlx_lm}
    for mode in ("speculative", "target"):
        for run in runs.values():
            run(mode, args.warmup_tokens)
        profiles = {side: Profile(counts=count_ops(run, mode, args.max_tokens)) for side, run in runs.items()}
        patches = instrument(ledger, models, detokenizer_class)
        try:
            for repeat in range(args.repeats):
                for side in list(runs) if repeat % 2 == 0 else list(runs)[::-1]:
                    add(profiles[side], profile_once(runs[side], mode, args.max_tokens, ledger))
        finally:
            patches.undo()
        if patches.missing:
            print(f"(not found, so not separated: {', '.join(patches.missing)})")
        print_profiles(f"speculative k={args.k}" if mode == "speculative" else "target-only", profiles)
    print(
        "* on CPUs eval/async_eval also wait while more than 10 tasks of 10 primitives are queued, so this row "
        "holds much of the compute; py-spy below splits it"
    )


# ---------------------------------------------------------------- py-spy


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


WAIT_FRAMES = ("array::wait", "Event::wait", "wait_for_one", "synchronize", "pthread_cond_wait")
DISPATCH_FRAMES = ("mlx::core::eval_impl", "mlx::core::async_eval", "eval_cpu", "scheduler::enqueue")


def sample_with_py_spy(target: Path, draft: Path, args: argparse.Namespace) -> None:
    """py-spy's samples of specplay's timed generations, by innermost Python function, and the
    share of them inside MLX's native eval (waiting, or queueing work)."""
    spy = py_spy()
    if spy is None:
        print("\npy-spy not installed: the sampling profile is skipped (pip install py-spy)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "samples.txt"
        child = [
            sys.executable,
            "-m",
            "benchmarks.vs_mlx_lm.profile_round",
            "--child",
            str(target),
            str(draft),
            "--k",
            str(args.k),
        ]
        child += ["--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats), "--prompt", args.prompt]
        command = [spy, "record", "--native", "--idle", "--rate", "1000", "--format", "raw", "--output", str(out)]
        root = str(Path(__file__).resolve().parents[2])  # the child imports this package from there
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        done = subprocess.run([*command, "--", *child], capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0 or not out.exists():
            print(f"\npy-spy could not sample here: {done.stderr.strip().splitlines()[-1:]}")
            return
        summarize_samples(out.read_text())


def summarize_samples(raw: str) -> None:
    by_function: Counter[str] = Counter()
    native: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not any(f.startswith("timed_generations ") for f in frames):
            continue  # loading, warm-up, exit
        samples = int(count)
        total += samples
        python = [f for f in frames if ".py:" in f]
        by_function[_short(python[-1]) if python else "?"] += samples
        tail = ";".join(frames[len(frames) - 8 :])
        kind = "waiting for compute" if any(w in tail for w in WAIT_FRAMES) else None
        kind = kind or ("MLX dispatch" if any(d in stack for d in DISPATCH_FRAMES) else "Python and the rest")
        native[kind] += samples
    if not total:
        print("\npy-spy: no samples in the timed generations")
        return
    print(f"\npy-spy --native, specplay speculative, main thread, {total} samples at 1 kHz:")
    for kind, samples in native.most_common():
        print(f"  {kind:<28}{100 * samples / total:6.1f}%")
    print("  innermost Python function:")
    for name, samples in by_function.most_common(12):
        print(f"    {100 * samples / total:5.1f}%  {name}")


def _short(frame: str) -> str:
    """'verify (specplay/backends/mlx/generation.py:214)' -> 'verify (generation.py:214)'."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1]}" if where else name


def timed_generations(sides: Sides, args: argparse.Namespace) -> None:
    """The stretch py-spy's samples are kept from (found by this function's name)."""
    for _ in range(args.repeats):
        sides.specplay("speculative", args.max_tokens)


def child_main() -> None:
    """The process py-spy samples: a warm-up, then the timed generations."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("TARGET", "DRAFT"), required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--prompt", required=True)
    args = parser.parse_args()
    backend = load_mlx_backend(args.child[0], [(DRAFTER, args.child[1])])
    sides = Sides(backend, args.prompt, args.k)
    sides.specplay("speculative", 32)
    timed_generations(sides, args)


# ---------------------------------------------------------------- entry


def main(args: argparse.Namespace, models_root: Path) -> None:
    from benchmarks.vs_mlx_lm.processes import smallest_models

    models = smallest_models(models_root)
    args.repeats = args.repeats or 5
    backend = load_mlx_backend(str(models.target), [(DRAFTER, str(models.draft))])
    sides = Sides(backend, args.prompt, args.k)
    print(f"profile: smallest models ({models.about}), greedy, k={args.k}, {args.max_tokens} tokens x {args.repeats}")
    print(f"BLAS threads: {blas.THREADS_CHOSEN}; both sides in this process on the same weights")
    measure_direct(sides, args)
    sample_with_py_spy(models.target, models.draft, args)


if __name__ == "__main__":
    child_main()
