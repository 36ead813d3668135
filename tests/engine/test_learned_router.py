"""The learned router's classifier: features, the fit, and its route choices (no files here)."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from specplay.engine.routers.learned import (
    FeatureSettings,
    FitSettings,
    LearnedRouter,
    copy_request,
    features,
    fit_router,
    ngram_counts,
    softmax,
)
from specplay.engine.routers.routing import CodeProseRouter, fallback_for, route_choice, route_map_for
from tests.support.checks import every

VOCABULARY = {
    "base": ["def", "return", "self", "lambda", "import", "yield", "class", "async"],
    "prose": ["the", "river", "morning", "quietly", "garden", "letter", "window", "story"],
    "lookup": ["rewrite", "rename", "shorten", "fix", "keeping", "verbatim", "formal", "tense"],
}
"""Three classes of synthetic prompt, each drawn from words of its own: linearly separable."""


def synthetic(count: int, seed: int) -> tuple[list[str], list[str]]:
    """`count` prompts per class of 6 to 14 words drawn (fixed seed) from its vocabulary."""
    draw = random.Random(seed)
    prompts, labels = [], []
    for _ in range(count):
        for label, words in VOCABULARY.items():
            prompts.append(" ".join(draw.choice(words) for _ in range(draw.randint(6, 14))))
            labels.append(label)
    return prompts, labels


def one_hot(labels: list[str], classes: list[str]) -> np.ndarray:
    return np.eye(len(classes))[[classes.index(label) for label in labels]]


CLASSES = sorted(VOCABULARY)


@pytest.fixture(scope="module")
def router() -> LearnedRouter:
    prompts, labels = synthetic(10, seed=0)
    return fit_router(prompts, one_hot(labels, CLASSES), CLASSES)


def test_a_separable_set_is_learned_and_held_out_prompts_are_all_classified_right(router: LearnedRouter) -> None:
    prompts, labels = synthetic(20, seed=1)  # drawn apart from the training prompts
    assert set(prompts).isdisjoint(synthetic(10, seed=0)[0])
    assert [router.classify(p) for p in prompts] == labels


def test_the_fit_is_deterministic(router: LearnedRouter) -> None:
    prompts, labels = synthetic(10, seed=0)
    again = fit_router(prompts, one_hot(labels, CLASSES), CLASSES)
    assert again.weights.tobytes() == router.weights.tobytes() and again.bias.tobytes() == router.bias.tobytes()
    assert again.idf.tobytes() == router.idf.tobytes()
    assert router.weights.dtype == router.bias.dtype == router.idf.dtype == np.float32


def test_the_fit_reaches_the_penalised_loss_minimum() -> None:
    """At the returned weights the penalised loss's gradient vanishes (to float32 rounding)."""
    prompts, labels = synthetic(4, seed=2)
    settings, fit = FeatureSettings(buckets=256), FitSettings(l2=0.05, iterations=3000)
    targets = one_hot(labels, CLASSES)
    router = fit_router(prompts, targets, CLASSES, settings, fit)
    counts = np.stack([ngram_counts(p, settings) for p in prompts])
    x = features(counts, prompts, router.idf.astype(np.float64), settings)
    weights, bias = router.weights.astype(np.float64), router.bias.astype(np.float64)
    residual = (softmax(x @ weights + bias) - targets) / len(prompts)
    assert np.abs(x.T @ residual + fit.l2 * weights).max() < 1e-5
    assert np.abs(residual.sum(axis=0)).max() < 1e-5


def test_ties_share_the_label() -> None:
    """A prompt whose drafters tied teaches no preference between them: with only such prompts,
    the router's probabilities for the two stay equal."""
    prompts = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"]
    router = fit_router(prompts, np.array([[0.5, 0.5]] * 3), ["a", "b"])
    assert every(abs(router.probabilities(p)[0] - 0.5) < 1e-6 for p in [*prompts, "anything else"])


def test_ngram_counts_count_every_ngram_of_the_lowercased_head() -> None:
    settings = FeatureSettings(ngram_min=1, ngram_max=4, buckets=1 << 16, sample_chars=10)
    counts = ngram_counts("AbcdE" * 10, settings)
    assert counts.sum() == 10 + 9 + 8 + 7  # n-grams of 1..4 characters in the first 10
    assert np.array_equal(counts, ngram_counts("abcde" * 2, settings))
    assert ngram_counts("", settings).sum() == 0 and ngram_counts("ab", settings).sum() == 3


def test_the_hash_is_the_same_in_every_process() -> None:
    """Python's own string hash changes from process to process; the router's must not."""
    code = (
        "import sys; from specplay.engine.routers.learned import FeatureSettings, ngram_counts; "
        "print(ngram_counts('def f(x):\\n    return x', FeatureSettings()).nonzero()[0].tolist())"
    )

    def counted(hash_seed: str) -> str:
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout

    runs = {counted("1"), counted("2")}
    here = ngram_counts("def f(x):\n    return x", FeatureSettings()).nonzero()[0].tolist()
    assert runs == {f"{here}\n"}


@pytest.mark.parametrize(
    ("prompt", "asks"),
    [
        ("Rewrite this email so it sounds formal:\n\nHi Sam, thanks for the report, it reads well.", 1.0),
        ("Fix the spelling in this and return it in full:\n\nThe lighthouse keeper climbed the stairs evry day.", 1.0),
        ("Rename `x` to `total` in this function:\n\ndef f(x):\n    return x + 1\n    # more lines here", 1.0),
        ("Explain what this function does:\n\ndef dedupe(items):\n    return list(dict.fromkeys(items))", 0.0),
        ("Rewrite the history of printing in three sentences.", 0.0),  # nothing given to copy
        ("Write a short story about a lighthouse keeper who finds a message in a bottle.", 0.0),
    ],
)
def test_copy_request(prompt: str, asks: float) -> None:
    assert copy_request(prompt) == asks


def test_feature_settings_out_of_range_are_refused() -> None:
    for bad in (FeatureSettings(buckets=1000), FeatureSettings(ngram_min=3, ngram_max=2), FeatureSettings(dense=("",))):
        with pytest.raises(ValueError):
            bad.check()


def test_a_learned_route_choice_says_the_learned_router_chose(router: LearnedRouter) -> None:
    prompt = "the river in the morning, quietly"
    drafters = ("base", "prose", "lookup")
    choice = route_choice(router, route_map_for(router, drafters, None), {}, prompt)
    assert (choice.prompt_class, choice.drafter) == ("prose", "prose")
    assert choice.learned and choice.why == "the learned router"
    sure = router.confidence(prompt)
    assert sure == pytest.approx(float(router.probabilities(prompt).max())) and sure > 0.5
    assert choice.confidence == sure and choice.chosen_by == "learned"
    assert choice.describe() == f"auto: prose (the learned router, {sure:.0%} sure)"
    mapped = route_choice(router, route_map_for(router, drafters, {"prose": "base"}), {"prose": "base"}, prompt)
    assert mapped.drafter == "base" and mapped.why == "the learned router's prose, then the route map"
    heuristic = CodeProseRouter()  # the heuristic's choices read as they always have
    plain = route_choice(heuristic, route_map_for(heuristic, ("base", "prose"), None), {}, prompt)
    assert plain.describe() == "auto: prose prompt → prose (the drafter named prose)" and not plain.learned


def test_where_the_learned_router_is_unsure_the_heuristic_chooses_and_says_so(router: LearnedRouter) -> None:
    """Below its min_confidence the heuristic decides, through its own map (here code → lookup,
    prose → none, a model set's map), and the choice names both and the confidence."""
    drafters = ("base", "prose", "lookup")
    sure_prompt, unsure_prompt = "the river in the morning, quietly", "a b c d e f g"
    sure, unsure = router.confidence(sure_prompt), router.confidence(unsure_prompt)
    assert unsure < 0.6 < sure  # a prompt of none of its words: the classes are close to even
    guarded = dataclasses.replace(router, min_confidence=0.6, unproven=None)  # as training leaves a proven one
    fallback = fallback_for(guarded, drafters, {"code": "lookup", "prose": "none"}, {"prose": "exit measured 0.3×"})
    assert fallback is not None
    route_map = route_map_for(guarded, drafters, None)
    choice = route_choice(guarded, route_map, {}, unsure_prompt, fallback=fallback)
    assert (choice.prompt_class, choice.drafter, choice.chosen_by) == ("prose", "none", "heuristic")
    assert choice.confidence == unsure
    assert choice.describe() == (
        f"auto: prose prompt → none (the heuristic, as the learned router is {unsure:.0%} sure, below its 60%; "
        "the route map: exit measured 0.3×)"
    )
    assert choice.record()["chosen_by"] == "heuristic"
    kept = route_choice(guarded, route_map, {}, sure_prompt, fallback=fallback)
    assert (kept.drafter, kept.chosen_by) == ("prose", "learned")
    # A proven router at threshold 0 never defers; the heuristic itself has no fallback.
    unguarded = dataclasses.replace(guarded, min_confidence=0.0)
    assert route_choice(unguarded, route_map, {}, unsure_prompt, fallback=fallback).chosen_by == "learned"
    assert fallback_for(CodeProseRouter(), drafters, {}, {}) is None
