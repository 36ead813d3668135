"""Training a learned router on scored sessions: each session's prompt, labelled with its best
drafter (scores.py; a tie shares the label evenly), fitted by engine/routers/learned.py.

Before the router is fitted to every session, it is cross-validated: each session is held out in
turn (leave-one-session-out, up to MIN_SESSIONS sessions; beyond, the sessions are dealt into FOLDS
folds by turns within each best drafter, in a fixed order), and a router fitted to the others picks
for it. Those picks decide whether `--route auto` follows the router at all: only where they found
the best drafter of more sessions than the heuristic's picks did (`beats_heuristic`; a tie keeps
the heuristic, the known quantity). Otherwise the router is `unproven` and the heuristic chooses
every prompt, saying why. The same picks choose the router's `min_confidence`: the threshold (from
a coarse grid, so that 20 sessions cannot overfit it) below which a followed router lets the
heuristic choose, the one under which the two together picked the best drafter most often out of
fold. With too few sessions to hold any out, the router is untested, so unproven.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specplay.engine.routers.learned import FeatureSettings, FitSettings, LearnedRouter, fit_router
from specplay.engine.routers.routing import CodeProseRouter
from specplay.router_training.evaluate import heuristic_pick
from specplay.router_training.examples import Example
from specplay.router_training.scores import UNITS, ScoreKind

PROMPT_HASHES_KEPT = 2000
"""Training prompts whose hashes the router file keeps, so eval can tell held-out sessions from
trained ones (16 hex digits each: 34 KB at most)."""


FOLDS = 5
"""Folds beyond MIN_SESSIONS sessions; fewer sessions than this are too few to hold any out."""
MIN_SESSIONS = 20
"""Fewer sessions than this are said to be too few to learn from; up to this many, each is held out
alone (five folds of eight sessions would fit each router on six)."""
ONE_SIDED = 0.9
"""A drafter best in this share of the sessions makes the training data one-sided."""
CONFIDENCE_GRID = (0.0, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The thresholds cross-validation chooses `min_confidence` from."""


@dataclass(frozen=True, slots=True)
class Held:
    """One session held out of a fold: the picks made for it."""

    confidence: float
    learned_best: bool
    heuristic_best: bool
    learned_regret: float
    heuristic_regret: float


@dataclass(frozen=True, slots=True)
class Validation:
    folds: int
    held: tuple[Held, ...]
    min_confidence: float

    @property
    def method(self) -> str:
        return LEAVE_ONE_OUT if self.folds == len(self.held) else f"{self.folds}-fold"

    @property
    def learned_best_picks(self) -> int:
        """The learned router's own picks out of fold that were a best drafter (no fallback)."""
        return sum(h.learned_best for h in self.held)

    @property
    def heuristic_best_picks(self) -> int:
        return sum(h.heuristic_best for h in self.held)

    @property
    def beats_heuristic(self) -> bool:
        """Whether `--route auto` follows the router: its own out-of-fold picks (not the
        fallback's, whose threshold these same picks chose) found more best drafters."""
        return self.learned_best_picks > self.heuristic_best_picks

    def best_picks(self, threshold: float) -> int:
        """Best picks out of fold of the router deferring below `threshold` to the heuristic."""
        return with_fallback(self.held, threshold)[0]

    def record(self) -> dict[str, Any]:
        """What the router file keeps of it (`trained_on.cross_validation`)."""
        n = len(self.held)
        deferred = sum(h.confidence < self.min_confidence for h in self.held)
        return {
            "folds": self.folds,
            "method": self.method,
            "sessions": n,
            "learned_best_picks": self.learned_best_picks,
            "heuristic_best_picks": self.heuristic_best_picks,
            "learned_mean_regret": sum(h.learned_regret for h in self.held) / n,
            "heuristic_mean_regret": sum(h.heuristic_regret for h in self.held) / n,
            "with_fallback_best_picks": self.best_picks(self.min_confidence),
            "deferred": deferred,
            "min_confidence": self.min_confidence,
            "beats_heuristic": self.beats_heuristic,
        }


LEAVE_ONE_OUT = "leave-one-session-out"
NOT_BEATEN = "did not beat the heuristic's picks on its training sessions in cross-validation"


def unproven_reason(validation: Any, sessions: Any) -> str | None:
    """Why `--route auto` does not follow a router, from what its file records of its
    cross-validation (`Validation.record`, None where there was none) and its training sessions;
    None where its picks beat the heuristic's. Words that follow the router's label."""
    if not isinstance(validation, dict):
        many = f" ({sessions})" if isinstance(sessions, int) and not isinstance(sessions, bool) else ""
        return f"was trained on too few sessions{many} to be tested against the heuristic (train on {FOLDS} or more)"
    if validation.get("beats_heuristic") is True:
        return None
    numbers = [validation.get(key) for key in ("learned_best_picks", "sessions", "heuristic_best_picks")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in numbers):
        return NOT_BEATEN
    learned, n, heuristic = numbers
    held = "one at a time" if validation.get("method") == LEAVE_ONE_OUT else "in folds"
    return (
        f"picked the best drafter for {learned} of its {n} training sessions held out {held}, "
        f"{'fewer than' if learned < heuristic else 'no more than'} the heuristic's {heuristic}"
    )


@dataclass(frozen=True, slots=True)
class Trained:
    router: LearnedRouter
    trained_on: dict[str, Any]
    """What the router file records of its training."""
    training_accuracy: float
    """Share of the training sessions whose best drafter it picks (not a measure of how it generalises)."""
    validation: Validation | None
    """Out-of-fold picks; None where there were too few sessions to hold any out."""
    warnings: tuple[str, ...] = ()
    """Why the training data may not be enough (too few sessions, one-sided labels), one line each."""


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


def label_targets(examples: Sequence[Example], classes: Sequence[str], kind: ScoreKind) -> np.ndarray:
    """One row per session: 1 on its best drafter, shared evenly where several tie."""
    targets = np.zeros((len(examples), len(classes)))
    for row, one in enumerate(examples):
        best = one.scores.best(kind)
        for name in best:
            targets[row, classes.index(name)] = 1 / len(best)
    return targets


def folds_of(examples: Sequence[Example], kind: ScoreKind, folds: int) -> list[int]:
    """Each session's fold: dealt by turns within each best drafter (ties by their first), the
    sessions in the order of their prompts' hashes, so every fold sees every label it can."""
    order = sorted(
        range(len(examples)), key=lambda i: (examples[i].scores.best(kind)[0], prompt_hash(examples[i].prompt))
    )
    fold = [0] * len(examples)
    for turn, i in enumerate(order):
        fold[i] = turn % folds
    return fold


def cross_validate(
    examples: Sequence[Example], kind: ScoreKind, settings: FeatureSettings, fit: FitSettings
) -> Validation | None:
    """Out-of-fold picks of routers fitted to the other folds (each session its own fold up to
    MIN_SESSIONS), and the `min_confidence` they support; None with fewer than FOLDS sessions."""
    if len(examples) < FOLDS:
        return None
    classes = list(examples[0].drafters)
    folds = len(examples) if len(examples) <= MIN_SESSIONS else FOLDS
    fold = folds_of(examples, kind, folds)
    heuristic = CodeProseRouter()
    held: list[Held | None] = [None] * len(examples)
    for k in range(folds):
        fitted = [one for one, f in zip(examples, fold, strict=True) if f != k]
        targets = label_targets(fitted, classes, kind)
        router = fit_router([one.prompt for one in fitted], targets, classes, settings, fit)
        for i, one in enumerate(examples):
            if fold[i] != k:
                continue
            learned, plain = router.classify(one.prompt), heuristic_pick(one, heuristic)
            best = one.scores.best(kind)
            held[i] = Held(
                confidence=router.confidence(one.prompt),
                learned_best=learned in best,
                heuristic_best=plain in best,
                learned_regret=one.scores.regret(kind, learned),
                heuristic_regret=one.scores.regret(kind, plain),
            )
    in_order = tuple(h for h in held if h is not None)  # every session is in one fold
    return Validation(folds, in_order, choose_min_confidence(in_order))


def choose_min_confidence(held: Sequence[Held]) -> float:
    """The threshold of CONFIDENCE_GRID under which deferring to the heuristic picked the best
    drafter most often out of fold; then the least regret; a tie goes to the higher threshold
    (the heuristic is the known quantity)."""

    def outcome(threshold: float) -> tuple[int, float, float]:
        best, regret = with_fallback(held, threshold)
        return best, -regret, threshold

    return max(CONFIDENCE_GRID, key=outcome)


def with_fallback(held: Sequence[Held], threshold: float) -> tuple[int, float]:
    """Best picks and summed regret out of fold, the router's pick where it is at least
    `threshold` sure and the heuristic's elsewhere."""
    best, regret = 0, 0.0
    for h in held:
        sure = h.confidence >= threshold
        best += h.learned_best if sure else h.heuristic_best
        regret += h.learned_regret if sure else h.heuristic_regret
    return best, regret


def data_warnings(examples: Sequence[Example], kind: ScoreKind) -> list[str]:
    """One line for each way the sessions are too thin to learn from."""
    n = len(examples)
    lines = []
    if n < MIN_SESSIONS:
        lines.append(
            f"warning: {n} session{'s' if n != 1 else ''} are too few to learn from; train on {MIN_SESSIONS} or more, "
            "prompts of every kind you run (code, prose, mixed, editing)"
        )
    singles = Counter(best[0] for one in examples if len(best := one.scores.best(kind)) == 1)
    top, count = singles.most_common(1)[0] if singles else ("", 0)
    if count >= ONE_SIDED * n and n > 1:
        lines.append(
            f"warning: one-sided: {top} is the best drafter in {count} of {n} sessions, so the router learns little "
            f"but to pick {top}; add sessions of prompts where another drafter wins"
        )
    never = [name for name in examples[0].drafters if not any(name in one.scores.best(kind) for one in examples)]
    if never and count < ONE_SIDED * n:
        lines.append(f"warning: {', '.join(never)} is never the best drafter here: the router will not pick it")
    return lines


def train(
    examples: Sequence[Example],
    kind: ScoreKind,
    settings: FeatureSettings | None = None,
    fit: FitSettings | None = None,
) -> Trained:
    """A router fitted to `examples`' best drafters by `kind` (default feature and fit settings:
    routers/learned.py's), followed or not by `--route auto` and its `min_confidence` as
    cross-validation found (module docstring). An unproven router's threshold is 1, so that a
    specplay that predates the test defers on every prompt too."""
    settings = settings or FeatureSettings()
    fit = fit or FitSettings()
    classes = list(examples[0].drafters)
    prompts = [one.prompt for one in examples]
    validation = cross_validate(examples, kind, settings, fit)
    router = fit_router(prompts, label_targets(examples, classes, kind), classes, settings, fit)
    unproven = unproven_reason(validation.record() if validation else None, len(examples))
    threshold = validation.min_confidence if validation and unproven is None else 1.0
    router = replace(router, min_confidence=threshold, unproven=unproven)
    labels: Counter[str] = Counter({name: 0 for name in classes})
    ties = 0
    correct = 0
    for one in examples:
        best = one.scores.best(kind)
        if len(best) > 1:
            ties += 1
        else:
            labels[best[0]] += 1
        correct += router.classify(one.prompt) in best
    trained_on = {
        "sessions": len(examples),
        "score": kind,
        "unit": UNITS[kind],
        "labels": dict(labels),
        "ties": ties,
        "l2": fit.l2,
        "iterations": fit.iterations,
        "prompt_sha256": sorted({prompt_hash(p) for p in prompts})[:PROMPT_HASHES_KEPT],
        "cross_validation": validation.record() if validation else None,
    }
    return Trained(
        router=router,
        trained_on=trained_on,
        training_accuracy=correct / len(examples),
        validation=validation,
        warnings=tuple(data_warnings(examples, kind)),
    )
