"""Training a learned router: cross-validation, whether `--route auto` follows the router at all
(its out-of-fold picks must beat the heuristic's), the threshold below which it lets the heuristic
choose, and the one-line warnings about thin training data."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from specplay.cli.router import _validation_line
from specplay.engine.routers.routing import fallback_for, routing_for
from specplay.errors import ConfigError
from specplay.router_training.evaluate import evaluate
from specplay.router_training.examples import Example, Examples
from specplay.router_training.router_file import OLDER_FILE, load_router, write_router
from specplay.router_training.scores import DrafterScore, SessionScores
from specplay.router_training.train import CONFIDENCE_GRID, FOLDS, Held, choose_min_confidence, folds_of, train

DRAFTERS = ("base", "lookup", "prose")
WORDS = {
    "lookup": ["rewrite", "rename", "shorten", "fix", "keeping", "verbatim", "formal", "tense"],
    "base": ["river", "morning", "quietly", "garden", "letter", "window", "story", "evening"],
}
"""Two kinds of prose prompt, each of its own words: the heuristic calls both prose."""


def _example(prompt: str, best: str) -> Example:
    """A session whose best drafter (by either score) is `best`; the heuristic's map sends
    everything to prose, so it never picks the best here."""
    scores = SessionScores({d: DrafterScore(4, 8 if d == best else 2, 10.0) for d in DRAFTERS})
    return Example(Path(f"{best}.jsonl"), prompt, scores, DRAFTERS, {"code": "prose", "prose": "prose"})


def _examples(per_label: int, seed: int) -> list[Example]:
    draw = random.Random(seed)
    return [
        _example(" ".join(draw.choice(words) for _ in range(draw.randint(6, 12))), label)
        for _ in range(per_label)
        for label, words in WORDS.items()
    ]


def test_folds_deal_each_label_by_turns() -> None:
    examples = _examples(10, seed=1)
    fold = folds_of(examples, "acceptance", FOLDS)
    for label in WORDS:
        counts = [
            sum(f == k and e.path.stem == label for e, f in zip(examples, fold, strict=True)) for k in range(FOLDS)
        ]
        assert counts == [2] * FOLDS


def test_a_router_that_beats_the_heuristic_out_of_fold_is_followed(tmp_path: Path) -> None:
    examples = _examples(12, seed=2)
    trained = train(examples, "acceptance")
    found = trained.validation
    assert found is not None and found.folds == FOLDS and len(found.held) == len(examples)
    record = found.record()
    assert record["heuristic_best_picks"] == 0  # it sends all to prose, never best here
    assert record["learned_best_picks"] >= 0.9 * len(examples)  # separable by their words
    # The threshold keeps every out-of-fold best pick the router made where it was sure.
    assert found.best_picks(found.min_confidence) == record["learned_best_picks"]
    assert trained.router.min_confidence == found.min_confidence < 1.0
    assert trained.trained_on["cross_validation"] == record
    assert trained.warnings == ("warning: prose is never the best drafter here: the router will not pick it",)
    path = tmp_path / "r.json"
    write_router(path, trained.router, trained.trained_on)
    assert load_router(path)[0].min_confidence == found.min_confidence


def _held(confidence: float, learned: bool, heuristic: bool) -> Held:
    return Held(confidence, learned, heuristic, 0.0 if learned else 1.0, 0.0 if heuristic else 1.0)


def test_the_threshold_splits_sure_right_picks_from_unsure_wrong_ones() -> None:
    """Sure (≥ 0.7): the router is right, the heuristic wrong; unsure (< 0.55): the reverse. Any
    threshold in (0.55, 0.7] gets every pick right; of the grid, 0.6 and 0.7 do, and the tie goes
    to the higher."""
    held = [_held(0.9, True, False), _held(0.7, True, False), _held(0.55, False, True), _held(0.4, False, True)]
    assert choose_min_confidence(held) == 0.7
    assert choose_min_confidence([_held(0.9, True, False), _held(0.45, True, False)]) == 0.4
    # A router never better than the heuristic is never followed; one always better, always.
    assert choose_min_confidence([_held(0.9, False, True), _held(0.6, True, True)]) == 1.0
    assert choose_min_confidence([_held(0.35, True, False)]) == CONFIDENCE_GRID[0]


def test_too_few_or_one_sided_sessions_are_said_and_an_untested_router_defers() -> None:
    few = _examples(2, seed=3)
    trained = train(few, "acceptance")
    assert trained.validation is None and trained.router.min_confidence == 1.0
    assert trained.trained_on["cross_validation"] is None
    assert trained.warnings[0].startswith("warning: 4 sessions are too few to learn from; train on 20 or more")
    one_sided = [_example(f"rewrite this text number {i} verbatim", "lookup") for i in range(20)]
    lines = train(one_sided, "acceptance").warnings
    assert lines == (
        "warning: one-sided: lookup is the best drafter in 20 of 20 sessions, so the router learns little but to "
        "pick lookup; add sessions of prompts where another drafter wins",
    )


@pytest.mark.parametrize("value", ['"0.5"', "-0.1", "1.5", "true", "null"])
def test_a_router_file_with_a_bad_threshold_is_refused(tmp_path: Path, value: str) -> None:
    trained = train(_examples(2, seed=4), "acceptance")
    path = tmp_path / "r.json"
    write_router(path, trained.router, trained.trained_on)
    text = path.read_text()
    assert '"min_confidence": 1.0' in text  # too few to validate: it defers on every prompt
    path.write_text(
        text.replace('"min_confidence": ' + str(trained.router.min_confidence), f'"min_confidence": {value}')
    )
    with pytest.raises(ConfigError, match="min_confidence is not a number from 0 to 1"):
        load_router(path)


def test_sessions_of_mixed_prompt_formats_are_said() -> None:
    """A router learns one workload: sessions encoded raw beside ones through the chat template
    (or not saying) are named in one warning line."""
    alike = Examples([dataclasses.replace(e, raw=False) for e in _examples(2, seed=5)])
    assert alike.prompt_format_line() == "prompts: the model's chat template, where it has one"
    mixed = Examples([*alike.examples, dataclasses.replace(alike.examples[0], raw=True)])
    assert mixed.prompt_format_line() == (
        "warning: the sessions mix prompt formats (the model's chat template, where it has one in 4; "
        "raw (as written: --raw) in 1): train and evaluate on runs encoded alike"
    )


# --- whether `--route auto` follows the router at all -------------------------------------------

PROSE_WORDS = ["river", "morning", "quietly", "garden", "letter", "window", "story", "evening"]


def _uninformative(bests: list[str], seed: int) -> list[Example]:
    """Sessions whose prompts are drawn from one vocabulary whatever their best drafter: nothing
    a router could learn from. The heuristic's map sends them all to prose."""
    draw = random.Random(seed)
    return [_example(" ".join(draw.choice(PROSE_WORDS) for _ in range(8)), best) for best in bests]


def test_a_router_whose_cross_validated_picks_lose_to_the_heuristic_is_not_followed(tmp_path: Path) -> None:
    """Eight sessions, half best served by prose (the heuristic's pick), half by lookup, the prompts
    alike: held out one at a time, the router picks the best drafter for 3, the heuristic for 4.
    `--route auto` keeps the heuristic's choice on every prompt, however sure the router is, and
    says why; the file records the verdict, and so does `router eval`'s `--route auto` row."""
    examples = _uninformative(["prose", "lookup"] * 4, seed=7)
    trained = train(examples, "acceptance")
    found = trained.validation
    assert found is not None and found.method == "leave-one-session-out" and found.folds == 8
    record = trained.trained_on["cross_validation"]
    assert (record["learned_best_picks"], record["heuristic_best_picks"], record["beats_heuristic"]) == (3, 4, False)
    why = (
        "picked the best drafter for 3 of its 8 training sessions held out one at a time, fewer than the heuristic's 4"
    )
    assert trained.router.unproven == why
    assert trained.router.min_confidence == 1.0  # a specplay from before the test defers everywhere too
    path = tmp_path / "r.json"
    write_router(path, trained.router, trained.trained_on)
    assert json.loads(path.read_text())["beats_heuristic"] is False
    loaded = load_router(path)[0]
    assert loaded.unproven == why
    prompt = examples[1].prompt
    fallback = fallback_for(loaded, DRAFTERS, {}, {})
    choice = routing_for(DRAFTERS, loaded, fallback=fallback).choice(prompt)
    assert (choice.drafter, choice.chosen_by) == ("prose", "heuristic")
    assert choice.describe() == (
        f"auto: prose prompt → prose (the heuristic, as the learned router r.json {why}; the drafter named prose)"
    )
    cases = evaluate(examples, loaded, "acceptance")
    assert all(c.deferred and c.with_fallback == c.heuristic for c in cases)
    assert _validation_line(trained) == (
        "cross-validated (each session held out in turn), best picks on held-out sessions: learned 3/8, "
        "heuristic 4/8: no better than the heuristic, so --route auto keeps the heuristic's choices"
    )


def test_a_router_no_better_than_the_heuristic_is_not_followed() -> None:
    """Prose is best everywhere: the router learns to pick it and is right as often as the
    heuristic, 8 of 8. A tie keeps the heuristic, the known quantity."""
    trained = train(_uninformative(["prose"] * 8, seed=8), "acceptance")
    assert trained.router.unproven == (
        "picked the best drafter for 8 of its 8 training sessions held out one at a time, no more than the "
        "heuristic's 8"
    )


def test_a_router_that_beats_the_heuristic_on_eight_sessions_is_followed(tmp_path: Path) -> None:
    """Eight sessions of two kinds of prompt, each of its own words and best drafter; the
    heuristic sends both kinds to prose, never best. Held out one at a time the router picks
    better, so `--route auto` follows it where it is sure."""
    examples = _examples(4, seed=9)
    trained = train(examples, "acceptance")
    record = trained.trained_on["cross_validation"]
    assert record["method"] == "leave-one-session-out" and record["heuristic_best_picks"] == 0
    assert record["learned_best_picks"] >= 6 and record["beats_heuristic"] is True
    assert trained.router.unproven is None and trained.router.min_confidence < 1.0
    path = tmp_path / "r.json"
    write_router(path, trained.router, trained.trained_on)
    loaded = load_router(path)[0]
    assert loaded.unproven is None
    sure = next(one.prompt for one in examples if loaded.confidence(one.prompt) >= loaded.min_confidence)
    choice = routing_for(DRAFTERS, loaded, fallback=fallback_for(loaded, DRAFTERS, {}, {})).choice(sure)
    assert choice.chosen_by == "learned"


def test_a_router_file_from_before_the_test_is_not_followed_and_says_so(tmp_path: Path) -> None:
    """A file without `beats_heuristic` (written before routers were tested against the
    heuristic) reads, and is treated as unproven, whatever its threshold."""
    trained = train(_examples(4, seed=9), "acceptance")
    path = tmp_path / "old.json"
    write_router(path, trained.router, trained.trained_on)
    record = json.loads(path.read_text())
    del record["beats_heuristic"]
    record["min_confidence"] = 0.0
    path.write_text(json.dumps(record))
    loaded = load_router(path)[0]
    assert loaded.unproven == OLDER_FILE
    choice = routing_for(DRAFTERS, loaded, fallback=fallback_for(loaded, DRAFTERS, {}, {})).choice("a story")
    assert choice.chosen_by == "heuristic"
    assert "the learned router old.json was written by an older specplay" in choice.describe()
    record["beats_heuristic"] = "yes"
    path.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="its beats_heuristic is not true or false"):
        load_router(path)
