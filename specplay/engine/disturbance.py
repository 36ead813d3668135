"""Whether the machine's speed moved while a speed was measured: one definition for every place
that reads a speed (`specplay costs`' round costs, a run's measured speedup in its summary line,
`run --json` and `specplay sessions`).

A speed is read from the same work timed again and again. The timings are taken in groups of
GROUP_STEPS in a row, each group's median one sample (a spike inside a group is no change of
speed), and the samples' quartile range over their median is the drift: where the machine's load
changes while it measures (another process starting or stopping), the samples move apart. Above
DRIFT_LIMIT the machine is called busy, and a speed or speedup read there is said to be disturbed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

GROUP_STEPS = 3
"""Timings a sample is the median of: `costs`' short target-only runs time this many steps each."""
DRIFT_LIMIT = 0.15
"""The drift above which the machine is said to have changed speed while measuring."""
TIMING_DRIFT = "timing_drift"
"""A lane's metric (engine/metrics.py): the drift of its repeated work, as `grouped_drift` reads it."""


def drift(samples_ms: Sequence[float]) -> float:
    """The quartile range of `samples_ms` over their median (0 with fewer than two)."""
    if len(samples_ms) < 2 or statistics.median(samples_ms) <= 0:
        return 0.0
    low, _, high = statistics.quantiles(samples_ms, n=4, method="inclusive")
    return (high - low) / statistics.median(samples_ms)


def grouped_drift(times_ms: Sequence[float]) -> float | None:
    """`drift` over the medians of consecutive groups of GROUP_STEPS timings (a shorter last group
    left out); None with fewer than two groups, too few to say."""
    groups = [times_ms[i : i + GROUP_STEPS] for i in range(0, len(times_ms) - GROUP_STEPS + 1, GROUP_STEPS)]
    if len(groups) < 2:
        return None
    return drift([statistics.median(group) for group in groups])


def busy_reason(measured_drift: float | None, what: str) -> str | None:
    """The sentence saying `what` (e.g. "the target step") moved too much while measuring; None
    where it did not (or could not be told)."""
    if measured_drift is None or measured_drift <= DRIFT_LIMIT:
        return None
    return (
        f"{what} moved by {measured_drift:.0%} (quartile range over median) while measuring, "
        f"more than {DRIFT_LIMIT:.0%}: the machine is busy"
    )


def speedup_disturbance(lane: Mapping[str, Any], baseline: Mapping[str, Any]) -> str | None:
    """Why a speedup measured between a lane and the target-only lane beside it is disturbed (from
    the two lanes' metrics), or None: either lane's repeated work drifted. Lanes recorded before
    the metric existed say nothing."""
    for metrics, what in ((baseline, "the target-only lane's step"), (lane, _work_of(lane))):
        if (reason := busy_reason(_recorded_drift(metrics), what)) is not None:
            return reason
    return None


def _recorded_drift(metrics: Mapping[str, Any]) -> float | None:
    """The lane's drift where it holds one (a session file's may hold anything)."""
    value = metrics.get(TIMING_DRIFT)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _work_of(metrics: Mapping[str, Any]) -> str:
    """What a lane's drift timed: a speculative lane's verify passes, a target-only lane's steps."""
    return "the speculative lane's verify pass" if metrics.get("num_spec_steps") is not None else "the lane's step"


TurnMetrics = tuple[int, Mapping[str, Any], Mapping[str, Any]]
"""A turn's number, its lane's metrics and its yardstick's."""


def turns_disturbance(turns: Iterable[TurnMetrics], named: bool = True) -> str | None:
    """Why a conversation's speedup is disturbed: each turn's (its number, its lane's and its
    yardstick's metrics) where `speedup_disturbance` says so, named by its turn unless `named` is
    False (a conversation of one turn); None where no turn was."""
    reasons = ((turn, speedup_disturbance(lane, baseline)) for turn, lane, baseline in turns)
    return "; ".join(f"turn {turn}: {why}" if named else why for turn, why in reasons if why) or None
