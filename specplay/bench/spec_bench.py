"""Spec-Bench's arithmetic (hemingkx/Spec-Bench, evaluation/speed.py), as pure functions.

The rule, per task (and `overall`, every question), method against baseline (target-only):
- a question's tokens/s is the sum of its turns' new tokens over the sum of its turns' wall
  times (each turn's whole request: prefill and decode);
- a task's tokens/s is the mean over its questions; its speedup is the method's mean over the
  baseline's mean on the same questions: a ratio of means, not a mean of ratios;
- over several runs (specplay's repeats) the speedup is the mean of each run's speedup, with their
  sample standard deviation (Spec-Bench's --mean-report);
- mean accepted tokens is the mean over every decoding step (every target forward pass) of the
  tokens it committed, accepted drafts + 1 (Spec-Bench's accept_lengths): specplay's mean
  acceptance length over all the rounds. Target-only has none.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specplay.engine.speedup import mean_acceptance_length


@dataclass(frozen=True, slots=True)
class QuestionRun:
    """One question answered once by one method: its turns' numbers."""

    new_tokens: tuple[int, ...]
    wall_time_s: tuple[float, ...]
    steps: int = 0
    """Decoding steps (rounds) over all turns; 0 for target-only, which reports none."""
    accepted: int = 0
    """Accepted draft tokens over those steps."""

    @property
    def tokens_per_s(self) -> float:
        return sum(self.new_tokens) / sum(self.wall_time_s)


@dataclass(frozen=True, slots=True)
class TaskSpeed:
    questions: int
    tokens_per_s: float | None
    """The mean over runs of the mean over questions (None: not a speed, a remote lane's)."""
    baseline_tokens_per_s: float
    speedup: float | None
    """The mean over runs of each run's ratio of means; None where the baseline made no tokens."""
    speedup_std: float | None
    """Across runs (sample standard deviation); None with one run."""
    mean_accepted_tokens: float | None


def run_speedup(method: Sequence[QuestionRun], baseline: Sequence[QuestionRun]) -> float | None:
    """One run's speedup on a task: mean tokens/s over its questions, the method's over the baseline's."""
    base = statistics.fmean(q.tokens_per_s for q in baseline)
    return statistics.fmean(q.tokens_per_s for q in method) / base if base else None


def mean_accepted_tokens(runs: Sequence[QuestionRun]) -> float | None:
    """The mean over all their steps of the tokens each committed (accepted drafts + 1)."""
    return mean_acceptance_length(sum(q.accepted for q in runs), sum(q.steps for q in runs))


def task_speed(method: Sequence[Sequence[QuestionRun]], baseline: Sequence[Sequence[QuestionRun]]) -> TaskSpeed:
    """A task over several runs: `method[r]` and `baseline[r]` are run r's questions (the same
    questions, each list non-empty)."""
    speedups = [run_speedup(m, b) for m, b in zip(method, baseline, strict=True)]
    known = [s for s in speedups if s is not None]
    return TaskSpeed(
        questions=len(method[0]),
        tokens_per_s=statistics.fmean(statistics.fmean(q.tokens_per_s for q in run) for run in method),
        baseline_tokens_per_s=statistics.fmean(statistics.fmean(q.tokens_per_s for q in run) for run in baseline),
        speedup=statistics.fmean(known) if len(known) == len(speedups) else None,
        speedup_std=statistics.stdev(known) if len(known) == len(speedups) > 1 else None,
        mean_accepted_tokens=mean_accepted_tokens([q for run in method for q in run]),
    )
