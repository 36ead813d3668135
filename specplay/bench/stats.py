"""The arithmetic of a benchmark report: pure functions over recorded results."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from specplay.engine.metrics import predicted_speedup

__all__ = [
    "coefficient_of_variation",
    "expected_accepted",
    "median",
    "needs_more_repeats",
    "predicted_speedup",
    "solve_alpha",
]

CV_LIMIT = 0.05  # mini-vllm-rs's rule: a throughput this noisy earns two more repeats


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over the mean; 0 for fewer than two values."""
    if len(values) < 2 or statistics.fmean(values) == 0:
        return 0.0
    return statistics.stdev(values) / statistics.fmean(values)


def needs_more_repeats(throughputs: Sequence[Sequence[float]]) -> bool:
    """True when any configuration's tokens/s varies by more than 5% across repeats."""
    return any(coefficient_of_variation(values) > CV_LIMIT for values in throughputs)


def expected_accepted(alpha: float, k: int) -> float:
    """Draft tokens accepted per round when each is accepted with probability alpha, independently:
    alpha + alpha^2 + ... + alpha^k (Leviathan et al. 2023)."""
    return sum(alpha**i for i in range(1, k + 1))


def solve_alpha(draft_lengths: Sequence[int], num_accepted: int) -> float | None:
    """The per-token acceptance alpha that explains the accepted count over rounds of these
    draft lengths. accepted/proposed underestimates it: a rejection ends the round."""
    if not draft_lengths:
        return None
    target = num_accepted / len(draft_lengths)
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: the expectation rises with alpha
        mid = (low + high) / 2
        if statistics.fmean(expected_accepted(mid, k) for k in draft_lengths) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2
