"""A session's drafters scored from its counterfactual rounds, and sessions read as examples."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specplay.engine.events import Counterfactual, RoundEvent
from specplay.engine.layout import chain
from specplay.engine.routers.routing import CodeProseRouter
from specplay.errors import ConfigError
from specplay.router_training.evaluate import evaluate, heuristic_pick
from specplay.router_training.examples import NO_COUNTERFACTUALS, Example, read_examples
from specplay.router_training.scores import DrafterScore, SessionScores, session_scores
from tests.support.checks import every
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.scripted import ScriptedBackend
from tests.support.session_events import target_events, write_session

SAVED = Path(__file__).resolve().parents[1] / "data" / "saved_sessions"


def _round(index: int, accepted: int, ms: tuple[float, ...], others: dict[str, tuple[int, float]]) -> RoundEvent:
    counterfactuals = tuple(Counterfactual(name, (1, 2, 3), n, elapsed) for name, (n, elapsed) in others.items())
    return RoundEvent(index, 0, "a", (1, 2, 3), chain(3), (), accepted, (), *ms, counterfactuals=counterfactuals)


def test_scores_of_hand_made_rounds() -> None:
    events = [
        _round(0, 2, (1.0, 3.0, 1.0), {"b": (3, 4.0), "c": (2, 5.0)}),
        _round(1, 0, (1.0, 3.0, 1.0), {"b": (1, 6.0), "c": (0, 5.0)}),
        _round(2, 3, (1.0, 3.0, 1.0), {}),  # counterfactual routes off for this round: not counted
    ]
    scores = session_scores(events)
    assert scores is not None and scores.timed
    assert scores.drafters == {
        "a": DrafterScore(rounds=2, accepted=2, round_ms=10.0),
        "b": DrafterScore(rounds=2, accepted=4, round_ms=10.0),
        "c": DrafterScore(rounds=2, accepted=2, round_ms=10.0),
    }
    assert scores.score("acceptance") == {"a": 2.0, "b": 3.0, "c": 2.0}  # 1 + accepted per round
    assert scores.score("speed") == pytest.approx({"a": 400.0, "b": 600.0, "c": 400.0})  # tokens per 10 ms
    assert scores.best("acceptance") == ["b"] and scores.regret("acceptance", "a") == 1.0
    assert scores.regret("speed", "c") == pytest.approx(200.0)


def test_ties_are_all_best_and_untimed_rounds_have_no_speed() -> None:
    scores = SessionScores({"a": DrafterScore(4, 6, 0.0), "b": DrafterScore(4, 6, 0.0), "c": DrafterScore(4, 2, 0.0)})
    assert scores.best("acceptance") == ["a", "b"] and scores.regret("acceptance", "b") == 0.0
    assert not scores.timed and scores.score("speed") == {}


def test_no_counterfactual_rounds_no_scores() -> None:
    assert session_scores([_round(0, 2, (1.0, 3.0, 1.0), {})]) is None


def test_scores_agree_with_the_run_metrics(scripted: ScriptedBackend) -> None:
    events = run(scripted, PROSE_PROMPT, route="near", k=3, counterfactual=True, max_tokens=30)
    scores = session_scores(rounds(events))
    assert scores is not None and scores.timed  # the scripted clock moves as its models compute
    per_drafter = done(events).metrics["counterfactual"]
    assert set(scores.drafters) == set(per_drafter) == {"near", "far", "self", "lookup"}
    for name, score in scores.drafters.items():
        assert score.mean_acceptance_length == pytest.approx(per_drafter[name]["mean_acceptance_length"])
    assert scores.best("acceptance") == ["self"]  # the target itself: every draft accepted


def _session(directory: Path, scripted: ScriptedBackend, prompt: str, **about: object) -> Path:
    events = run(scripted, prompt, route="near", k=3, counterfactual=True, max_tokens=12)
    identity = {"source": "scripted", "path": "scripted"}
    models = {name: identity for name in ("target", *scripted.drafters)}
    backend = {"backend": "mlx", "device": "cpu", "models": models}
    return write_session(directory, {"speculative": events}, prompt=prompt, backend=backend)


def test_read_examples_skips_and_counts(tmp_path: Path, scripted: ScriptedBackend) -> None:
    _session(tmp_path, scripted, CODE_PROMPT)
    _session(tmp_path, scripted, PROSE_PROMPT)
    write_session(tmp_path, {"target": target_events([(10, "a"), (11, "b")])})  # target-only
    found = read_examples([str(tmp_path), str(SAVED / "run-greedy-lossless.jsonl")])
    assert sorted(e.prompt for e in found.examples) == sorted([CODE_PROMPT, PROSE_PROMPT])
    assert every(e.drafters == ("far", "lookup", "near", "self") for e in found.examples)
    assert every(e.drafter_order == ("near", "far", "self", "lookup") for e in found.examples)
    assert found.skipped == {NO_COUNTERFACTUALS: 2}
    assert found.skipped_lines() == ["skipped 2 sessions without counterfactual routes"]
    # sessions of other drafters than a router's are skipped too
    with pytest.raises(ConfigError, match="skipped 2 sessions of other drafters"):
        read_examples([str(tmp_path)], drafters=("base", "prose"))


def test_nothing_usable_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        read_examples([str(SAVED / "run-greedy-lossless.jsonl"), str(tmp_path)])
    assert "skipped 1 session without counterfactual routes" in str(error.value) and "\n" not in str(error.value)


def _example(prompt: str, route_map: dict[str, str], order: tuple[str, ...] = ("base", "prose", "lookup")) -> Example:
    scores = SessionScores({name: DrafterScore(2, i, 10.0) for i, name in enumerate(sorted(order))})
    return Example(Path("s.jsonl"), prompt, scores, order, route_map)


def test_the_heuristic_routes_through_the_recorded_map_or_the_default_one() -> None:
    code, heuristic = "def f(x):\n    return x + 1\n", CodeProseRouter()
    assert heuristic_pick(_example(code, {"code": "lookup", "prose": "prose"}), heuristic) == "lookup"
    # a learned router's recorded map names drafters, not the heuristic's classes: the default map
    assert heuristic_pick(_example(code, {"base": "base", "lookup": "lookup", "prose": "prose"}), heuristic) == "base"
    assert heuristic_pick(_example(code, {}, order=("prose", "base", "lookup")), heuristic) == "prose"


def test_evaluate_scores_each_pick() -> None:
    one = _example("Write a short story about the sea.", {})  # scores base 1.5, lookup 2.0, prose 2.5 (acceptance)
    [case] = evaluate([one], _Fixed("lookup"), "acceptance")
    assert (case.best, case.learned, case.heuristic) == (["prose"], "lookup", "prose")
    assert (case.learned_regret, case.heuristic_regret) == (0.5, 0.0)


class _Fixed:
    """A router that always picks one drafter."""

    classes = ("base", "lookup", "prose")
    label = "a fixed router"
    min_confidence = 0.0
    unproven = None

    def __init__(self, pick: str) -> None:
        self.pick = pick

    def classify(self, prompt: str) -> str:
        return self.pick

    def confidence(self, prompt: str) -> float | None:
        return None


def test_none_is_no_drafter_a_router_learns(tmp_path: Path, scripted: ScriptedBackend) -> None:
    """`--route none --counterfactual`: the rounds drafted nothing, so only the drafters judged
    beside them are scored; a router of `none` would be refused by every run."""
    events = run(scripted, PROSE_PROMPT, route="none", k=3, counterfactual=True, max_tokens=12)
    assert every(event.drafter == "none" for event in rounds(events))
    scores = session_scores(rounds(events))
    assert scores is not None and set(scores.drafters) == {"near", "far", "self", "lookup"}
    identity = {"source": "scripted", "path": "scripted"}
    models = {name: identity for name in ("target", *scripted.drafters)}
    write_session(tmp_path, {"speculative": events}, prompt=PROSE_PROMPT, backend={"backend": "mlx", "models": models})
    [one] = read_examples([str(tmp_path)]).examples
    assert one.drafters == ("far", "lookup", "near", "self")


def _damaged(events: list, change: dict[str, object]) -> list:
    """The events with the second round's first counterfactual changed as `change` says."""
    at = next(i for i, e in enumerate(events) if isinstance(e, RoundEvent) and e.index == 1)
    event = events[at]
    first = dataclasses.replace(event.counterfactuals[0], **change)
    changed = dataclasses.replace(event, counterfactuals=(first, *event.counterfactuals[1:]))
    return [*events[:at], changed, *events[at + 1 :]]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"num_accepted": 10**9}, "num_accepted is 1000000000"),
        ({"num_accepted": -5}, "num_accepted is -5"),
        ({"elapsed_ms": 1e300}, "elapsed_ms is 1e+300 ms"),
        ({"drafter": "none"}, "counterfactual drafter 'none'"),
    ],
)
def test_counterfactuals_no_run_produces_are_skipped_in_a_line_naming_the_session(
    tmp_path: Path, scripted: ScriptedBackend, change: dict[str, object], said: str
) -> None:
    good = _session(tmp_path, scripted, PROSE_PROMPT)
    events = run(scripted, CODE_PROMPT, route="near", k=3, counterfactual=True, max_tokens=12)
    identity = {"source": "scripted", "path": "scripted"}
    models = {name: identity for name in ("target", *scripted.drafters)}
    backend = {"backend": "mlx", "device": "cpu", "models": models}
    bad = write_session(tmp_path, {"speculative": _damaged(events, change)}, prompt=CODE_PROMPT, backend=backend)
    found = read_examples([str(tmp_path)])
    assert [one.path for one in found.examples] == [good]
    [line] = found.skipped_lines()
    assert str(bad) in line and "round 1" in line and said in line and "\n" not in line
