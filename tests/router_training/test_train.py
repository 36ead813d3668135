"""Training a learned router: cross-validation, the threshold below which `--route auto` lets the
heuristic choose, and the one-line warnings about thin training data."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from specplay.errors import ConfigError
from specplay.router_training.examples import Example, Examples
from specplay.router_training.router_file import load_router, write_router
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
