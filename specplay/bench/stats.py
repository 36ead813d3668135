"""The arithmetic of a benchmark report: pure functions over recorded results."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

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


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile), the benchmarks' spread; one value is all three."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summed_by_position(counts: Sequence[Sequence[int]]) -> list[int]:
    """Several requests' counts by draft position, summed position by position (a request that
    drafted less counts nothing beyond its length)."""
    width = max((len(c) for c in counts), default=0)
    return [sum(c[i] for c in counts if i < len(c)) for i in range(width)]
