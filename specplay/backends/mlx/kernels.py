"""A round's sampling and acceptance math as pure functions of arrays, compiled where that pays.

`mx.compile` fuses a function's element-wise work into fewer kernels. On Apple GPUs that saves a
kernel launch per operation, as mlx-lm's compiled samplers do. On CPUs the math of a real
vocabulary (16k tokens and up) is bound by its exponentials, not by dispatch: compiled it runs
at 0.93-1.03x eager, and each new graph is first built by a C++ compiler at run time (up to 0.4 s).
Only toy vocabularies gain there (1.1-1.25x at 4k tokens), so CPUs run the math eagerly;
`benchmarks/bench_compile.py` measures both. Either way the results are the same arrays, so a
seed gives the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import mlx.core as mx

from specplay.engine.accept import inverse_cdf_sample
from specplay.engine.rules import MENTORED, AcceptanceRule
from specplay.engine.sampling import sampling_probs
from specplay.engine.settings import SamplingParams
from specplay.engine.verify_rows import reads_rows, verify_rows

Arrays = dict[str, mx.array]
DrawKernel = Callable[[mx.array, mx.array], tuple[mx.array, mx.array]]
VerifyKernel = Callable[[mx.array, mx.array, mx.array, mx.array], Arrays]


def compile_by_default() -> bool:
    """Compile on a GPU, where fusing pays; not on CPUs, where it does not (above)."""
    return mx.default_device() == mx.gpu


def _maybe_compiled(kernel: Callable[..., object], compiled: bool) -> Callable[..., object]:
    return mx.compile(kernel) if compiled else kernel


# A kernel closes over the settings it reads, so each setting has a kernel of its own; a compiled
# one is traced again only when the shapes change (k, the vocabulary).
@lru_cache(maxsize=16)
def draw_kernel(sampling: SamplingParams, compiled: bool) -> DrawKernel:
    """(logits [rows, vocab], uniforms [rows]) -> (one token per row, the distribution it was
    drawn from), for a temperature above 0 (the argmax needs neither a draw nor a kernel)."""

    def draw(logits: mx.array, uniforms: mx.array) -> tuple[mx.array, mx.array]:
        probs = sampling_probs(logits, sampling, mx)
        return inverse_cdf_sample(probs, uniforms, mx), probs

    return _maybe_compiled(draw, compiled)  # type: ignore[return-value]


def verify_kernel(sampling: SamplingParams, rule: AcceptanceRule, n: int, compiled: bool) -> VerifyKernel:
    """(target logits [k + 1, vocab], drafted [k], p_draft [k, vocab], uniforms) -> the arrays a
    round reads: p_target(x) and p_draft(x), TV, the target's argmax, a residual draw at each
    drafted position and the bonus draw after them; the rule's TV and statistics, and with `n` > 0
    each distribution's n most likely tokens. k > 0. `uniforms` are the round's residual draws
    then its bonus draw: the bonus takes the first after the k drafted positions' (with a draft
    shorter than the round's k, one of the residual draws no position used)."""
    # Rules judged from d, and lossless ones, read nothing of the rule on the device (the engine
    # computes theta on the host), so one kernel serves every TV budget.
    return _verify_kernel(sampling, rule if reads_rows(rule) else MENTORED, n, compiled)


@lru_cache(maxsize=16)
def _verify_kernel(sampling: SamplingParams, rule: AcceptanceRule, n: int, compiled: bool) -> VerifyKernel:
    def verify(logits: mx.array, drafted: mx.array, p_draft: mx.array, uniforms: mx.array) -> Arrays:
        p_target = sampling_probs(logits, sampling, mx)
        return verify_rows(p_target, drafted, p_draft, uniforms, rule=rule, n=n, xp=mx)

    return _maybe_compiled(verify, compiled)  # type: ignore[return-value]
