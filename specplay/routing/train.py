"""Training a learned router on scored sessions: each session's prompt, labelled with its best
drafter (scores.py; a tie shares the label evenly), fitted by engine/learned_router.py."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specplay.engine.learned_router import FeatureSettings, FitSettings, LearnedRouter, fit_router
from specplay.routing.examples import Example
from specplay.routing.scores import UNITS, ScoreKind

PROMPT_HASHES_KEPT = 2000
"""Training prompts whose hashes the router file keeps, so eval can tell held-out sessions from
trained ones (16 hex digits each: 34 KB at most)."""


@dataclass(frozen=True, slots=True)
class Trained:
    router: LearnedRouter
    trained_on: dict[str, Any]
    """What the router file records of its training."""
    training_accuracy: float
    """Share of the training sessions whose best drafter it picks (not a measure of how it generalises)."""


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


def train(
    examples: Sequence[Example],
    kind: ScoreKind,
    settings: FeatureSettings | None = None,
    fit: FitSettings | None = None,
) -> Trained:
    """A router fitted to `examples`' best drafters by `kind` (default feature and fit settings:
    learned_router.py's)."""
    settings = settings or FeatureSettings()
    fit = fit or FitSettings()
    classes = list(examples[0].drafters)
    prompts = [one.prompt for one in examples]
    router = fit_router(prompts, label_targets(examples, classes, kind), classes, settings, fit)
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
    }
    return Trained(router=router, trained_on=trained_on, training_accuracy=correct / len(examples))
