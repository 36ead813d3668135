"""How well each drafter served a session, from its counterfactual rounds: what a learned router's
labels and its regret are made of, defined here once.

- **acceptance**: the drafter's mean acceptance length over the counterfactual rounds
  (speedup.mean_acceptance_length: its accepted drafts per round, plus the one token every round
  ends with), in tokens per round.
- **speed**: the same tokens over the drafter's own round time, in tokens per second. The routed
  drafter's round is its draft, verify and host time (draft_ms + verify_ms + overhead_ms); another
  drafter's is its counterfactual's elapsed_ms: its proposal drafted, verified in a target pass of
  its own and judged, the caches put back. (The round's verify_ms is of the routed drafter's
  proposal: a drafter that proposed fewer tokens had a cheaper verify pass, so elapsed_ms minus
  verify_ms would undercount it, below zero for prompt lookup finding nothing to copy.)

Rounds of the `none` route drafted nothing and are no drafter's: only the drafters judged beside
them are scored (a router picks among drafters, and every run refuses one that names `none`).

A session's best drafter is the one with the highest score (all those within TIE of it); the
regret of a choice is the best score minus the chosen drafter's, in the score's unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from specplay.engine.events import RoundEvent
from specplay.engine.settings import NONE_ROUTE
from specplay.engine.speedup import mean_acceptance_length

ScoreKind = Literal["speed", "acceptance"]
SCORE_KINDS: tuple[ScoreKind, ...] = ("speed", "acceptance")
UNITS: Mapping[ScoreKind, str] = {"speed": "tokens per second", "acceptance": "tokens per round"}
"""What each score is measured in, as output says it."""
TIE = 1e-9
"""Relative: scores this close to the best are the best too (equal mean acceptance lengths are common)."""


@dataclass(frozen=True, slots=True)
class DrafterScore:
    """One drafter over a session's counterfactual rounds."""

    rounds: int
    accepted: int
    """Its accepted drafts, summed over the rounds."""
    round_ms: float
    """Its rounds' time, summed (module docstring)."""

    @property
    def mean_acceptance_length(self) -> float:
        return mean_acceptance_length(self.accepted, self.rounds) or 0.0

    @property
    def tokens_per_s(self) -> float | None:
        """None where its rounds were not timed (a clock that did not move)."""
        return 1000 * self.rounds * self.mean_acceptance_length / self.round_ms if self.round_ms > 0 else None


@dataclass(frozen=True, slots=True)
class SessionScores:
    """Every drafter's score in one session."""

    drafters: Mapping[str, DrafterScore]

    @property
    def timed(self) -> bool:
        """Whether every drafter's rounds were timed, so that speed can be scored."""
        return all(d.tokens_per_s is not None for d in self.drafters.values())

    def score(self, kind: ScoreKind) -> dict[str, float]:
        """Each drafter's score; speed needs `timed`."""
        if kind == "acceptance":
            return {name: d.mean_acceptance_length for name, d in self.drafters.items()}
        speeds = {name: d.tokens_per_s for name, d in self.drafters.items()}
        return {name: speed for name, speed in speeds.items() if speed is not None}

    def best(self, kind: ScoreKind) -> list[str]:
        """The drafters with the highest score, in name order (several on a tie)."""
        scores = self.score(kind)
        top = max(scores.values())
        return sorted(name for name, value in scores.items() if value >= top - TIE * max(1.0, abs(top)))

    def regret(self, kind: ScoreKind, chosen: str) -> float:
        scores = self.score(kind)
        return max(scores.values()) - scores[chosen]


def session_scores(rounds: Iterable[RoundEvent]) -> SessionScores | None:
    """The scores from a lane's rounds; None where none had counterfactual routes (or, as in a
    run with one drafter, there was nothing to compare)."""
    accepted: dict[str, int] = {}
    counted: dict[str, int] = {}
    spent_ms: dict[str, float] = {}

    def add(name: str, num_accepted: int, ms: float) -> None:
        accepted[name] = accepted.get(name, 0) + num_accepted
        counted[name] = counted.get(name, 0) + 1
        spent_ms[name] = spent_ms.get(name, 0.0) + ms

    for event in rounds:
        if not event.counterfactuals:
            continue
        if event.drafter != NONE_ROUTE:
            add(event.drafter, event.num_accepted, event.draft_ms + event.verify_ms + event.overhead_ms)
        for other in event.counterfactuals:
            add(other.drafter, other.num_accepted, other.elapsed_ms)
    if len(counted) < 2:
        return None
    return SessionScores(
        {name: DrafterScore(counted[name], accepted[name], spent_ms[name]) for name in sorted(counted)}
    )
