"""A learned router against the heuristic on held-out sessions: for each, the drafter each router
picks against the session's best (scores.py), and the regret of each pick. Beside them, what
`--route auto` does with the learned router: its pick where it is at least `min_confidence` sure,
the heuristic's elsewhere ("with fallback")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specplay.engine.routers.routing import CodeProseRouter, Router, defers, route_map_for
from specplay.errors import ConfigError
from specplay.router_training.examples import Example
from specplay.router_training.scores import UNITS, ScoreKind


@dataclass(frozen=True, slots=True)
class Case:
    """One held-out session (a conversation's turn: its session and turn)."""

    session: str
    turn: int
    category: str | None
    prompt_name: str | None
    best: list[str]
    learned: str
    heuristic: str
    learned_regret: float
    heuristic_regret: float
    confidence: float | None
    """The learned router's probability of its pick."""
    with_fallback: str
    """`--route auto`'s pick: the learned one, or the heuristic's where the router is unsure."""
    with_fallback_regret: float
    deferred: bool
    """Whether the router was unsure, so the heuristic chose."""


def heuristic_pick(one: Example, heuristic: Router) -> str:
    """Where `--route auto` with the heuristic sends the session's prompt: through the route map
    the session records when it is the heuristic's (its classes), else the default map over the
    run's drafters in their order."""
    recorded = dict(one.route_map) if set(one.route_map) <= set(heuristic.classes) else {}
    if not set(recorded.values()) <= set(one.drafter_order):
        recorded = {}
    route_map = route_map_for(heuristic, one.drafter_order, recorded)
    return route_map[heuristic.classify(one.prompt)]


def evaluate(examples: Sequence[Example], router: Router, kind: ScoreKind) -> list[Case]:
    """Each session's picks; the router's classes must be the sessions' drafters."""
    heuristic = CodeProseRouter()
    cases = []
    for one in examples:
        if set(router.classes) != set(one.drafters):
            raise ConfigError("router", f"routes between {', '.join(router.classes)}, not {', '.join(one.drafters)}")
        learned = router.classify(one.prompt)
        plain = heuristic_pick(one, heuristic)
        confidence = router.confidence(one.prompt)
        deferred = defers(router, confidence)
        chosen = plain if deferred else learned
        cases.append(
            Case(
                session=one.path.name,
                turn=one.turn,
                category=one.category,
                prompt_name=one.prompt_name,
                best=one.scores.best(kind),
                learned=learned,
                heuristic=plain,
                learned_regret=one.scores.regret(kind, learned),
                heuristic_regret=one.scores.regret(kind, plain),
                confidence=confidence,
                with_fallback=chosen,
                with_fallback_regret=one.scores.regret(kind, chosen),
                deferred=deferred,
            )
        )
    return cases


def summary(cases: Sequence[Case]) -> dict[str, Any]:
    """Each picker's share of best picks and mean regret over `cases`."""
    n = len(cases)

    def scored(picks: Sequence[str], regrets: Sequence[float]) -> dict[str, Any]:
        best = sum(pick in c.best for pick, c in zip(picks, cases, strict=True))
        return {"best_picks": best, "accuracy": best / n, "mean_regret": sum(regrets) / n}

    return {
        "sessions": n,
        "learned": scored([c.learned for c in cases], [c.learned_regret for c in cases]),
        "heuristic": scored([c.heuristic for c in cases], [c.heuristic_regret for c in cases]),
        "with_fallback": {
            **scored([c.with_fallback for c in cases], [c.with_fallback_regret for c in cases]),
            "deferred": sum(c.deferred for c in cases),
        },
    }


def report(cases: Sequence[Case], kind: ScoreKind) -> dict[str, Any]:
    """The `router eval --json` object: overall, per category where every session records its
    prompt's category, and each case."""
    categories: dict[str, list[Case]] = {}
    if all(c.category is not None for c in cases):
        for c in cases:
            categories.setdefault(c.category or "", []).append(c)
    return {
        "score": kind,
        "unit": UNITS[kind],
        **summary(cases),
        "by_category": {name: summary(group) for name, group in categories.items()} or None,
        "cases": [asdict(c) for c in cases],
    }
