"""specplay's sampling and acceptance kernels, compiled (`mx.compile`) against eager, side by side.

    python benchmarks/bench_compile.py                  # SmolLM2's vocabulary and the demo models'
    python benchmarks/bench_compile.py --vocab 32000 --k 8 --temperature 1.0

For each vocabulary size: the first call of a compiled kernel (tracing, and on CPUs a native
compile), then the ratio eager / compiled per call, measured in alternating blocks so a slow phase
of the machine falls on both sides. Above 1 the compiled kernel is faster. specplay compiles where
this says it pays (backends/mlx/kernels.py: on a GPU, not on CPUs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx

from specplay.backends.mlx import kernels
from specplay.engine.rules import MENTORED, AcceptanceRule, Typical
from specplay.engine.sampling import softmax
from specplay.engine.settings import SamplingParams

RULES = {"lossless": MENTORED, "typical": Typical(typical_epsilon=0.09)}


def _inputs(vocab: int, k: int) -> tuple[mx.array, ...]:
    mx.random.seed(0)
    logits = mx.random.normal((k + 1, vocab)) * 3
    p_draft = softmax(mx.random.normal((k, vocab)) * 3, mx)
    drafted = mx.random.randint(0, vocab, (k,)).astype(mx.int32)
    uniforms = mx.random.uniform(shape=(k + 1,))
    mx.eval(logits, p_draft, drafted, uniforms)
    return logits, drafted, p_draft, uniforms


def _per_call_ms(call: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        mx.eval(call())
    return (time.perf_counter() - start) / calls * 1e3


def measure(name: str, make: Callable[[bool], Callable[[], object]], blocks: int, calls: int) -> None:
    eager = make(False)
    start = time.perf_counter()
    compiled = make(True)
    mx.eval(compiled())
    first_ms = (time.perf_counter() - start) * 1e3
    mx.eval(eager())
    ratios, ms = [], {False: [], True: []}
    for block in range(blocks):
        order = (False, True) if block % 2 == 0 else (True, False)
        for side in order:
            ms[side].append(_per_call_ms(compiled if side else eager, calls))
        ratios.append(ms[False][-1] / ms[True][-1])
    quartiles = statistics.quantiles(ratios, n=4)
    print(
        f"{name:<34} eager {statistics.median(ms[False]):7.3f} ms  compiled {statistics.median(ms[True]):7.3f} ms"
        f"  eager/compiled {statistics.median(ratios):.2f} (IQR {quartiles[0]:.2f}-{quartiles[2]:.2f})"
        f"  first compiled call {first_ms:8.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, action="append", help="vocabulary sizes (default 49152 and 512)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--blocks", type=int, default=12, help="alternating blocks per side")
    parser.add_argument("--calls", type=int, default=50, help="calls per block")
    args = parser.parse_args()
    sampling = SamplingParams(args.temperature)
    print(f"device {mx.default_device()}, k={args.k}, T={args.temperature}")
    for vocab in args.vocab or [49152, 512]:
        logits, drafted, p_draft, uniforms = _inputs(vocab, args.k)

        def draw(compiled: bool, row: mx.array = logits[:1], u: mx.array = uniforms[:1]) -> Callable[[], object]:
            kernel = kernels.draw_kernel(sampling, compiled)
            return lambda: kernel(row, u)

        measure(f"vocab {vocab}: drafting step", draw, args.blocks, args.calls)
        for rule_name, rule in RULES.items():
            arrays = (logits, drafted, p_draft, uniforms)

            def verify(compiled: bool, rule: AcceptanceRule = rule, arrays: tuple = arrays) -> Callable[[], object]:
                kernel = kernels.verify_kernel(sampling, rule, 0, compiled)
                return lambda: kernel(*arrays)

            measure(f"vocab {vocab}: verify ({rule_name})", verify, args.blocks, args.calls)


if __name__ == "__main__":
    main()
