"""Recorded sessions as advice: a class of prompt whose drafter measured below target-only speed
in the sessions recorded here goes to none, and auto says why; one that paid keeps its drafter."""

from __future__ import annotations

from pathlib import Path

from specplay.config.run_config import RunConfig
from specplay.drafters import ModelConfig
from specplay.router_training.evidence import recent_sessions, route_records, with_route_evidence
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

PROSE = "The lighthouse keeper climbed the stairs at dusk, as he had done for forty years, and lit the lamp."
CODE = "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"
MODELS = {"target": {"kind": "gguf", "source": "/m/t.gguf"}, "near": {"kind": "model", "source": "/m/near"}}


def config(directory: Path) -> RunConfig:
    return RunConfig(
        target=ModelConfig("target", "target", "gguf", "/m/t.gguf"),
        drafters=(ModelConfig("near", "drafter", "mlx", "/m/near"),),
        sessions_dir=directory,
    )


def record(directory: Path, prompt: str, speculative_s: float, target_s: float = 2.0) -> None:
    """A session of the speculative lane on `near` beside a target-only lane: each lane's tokens
    after its first in `speculative_s` and `target_s`, so the measured speedup is their ratio."""
    lanes = {
        "speculative": speculative_events(seconds=speculative_s),
        "target": target_events(same_as_rounds(ROUNDS), seconds=target_s),
    }
    backend = {"backend": "mlx", "device": "cpu", "models": MODELS}
    write_session(directory, lanes, prompt=prompt, backend=backend)


def test_a_class_whose_drafter_lost_goes_to_none_with_the_measurement(tmp_path: Path) -> None:
    record(tmp_path, PROSE, speculative_s=4.0)  # 0.5×
    record(tmp_path, PROSE, speculative_s=2.5)  # 0.8×
    record(tmp_path, CODE, speculative_s=1.0)  # 2×: code keeps its drafter
    record(tmp_path, CODE, speculative_s=1.0)
    records = route_records(config(tmp_path), recent_sessions(config(tmp_path)))
    assert sorted(records[("prose", "near")].speedups) == [0.5, 0.8]
    assert records[("code", "near")].speedups == (2.0, 2.0)
    advised = with_route_evidence(config(tmp_path))
    assert advised.route_map == {"prose": "none"}
    assert advised.route_notes == {"prose": "near measured 0.65× on prose here (2 sessions)"}


def test_one_session_is_no_verdict_and_the_users_map_wins(tmp_path: Path) -> None:
    record(tmp_path, PROSE, speculative_s=4.0)
    assert with_route_evidence(config(tmp_path)).route_map == {}  # one run may have met a busy machine
    record(tmp_path, PROSE, speculative_s=4.0)
    assert with_route_evidence(config(tmp_path), named_by_user={"prose"}).route_map == {}


def test_sessions_of_other_models_or_unreadable_files_say_nothing(tmp_path: Path) -> None:
    record(tmp_path, PROSE, speculative_s=4.0)
    record(tmp_path, PROSE, speculative_s=4.0)
    (tmp_path / "2099-01-01T00-00-00_broken.jsonl").write_text("not a session\n")
    other = RunConfig(
        target=ModelConfig("target", "target", "gguf", "/m/other.gguf"),
        drafters=(ModelConfig("near", "drafter", "mlx", "/m/near"),),
        sessions_dir=tmp_path,
    )
    assert with_route_evidence(other) == other
    assert with_route_evidence(config(tmp_path)).route_map == {"prose": "none"}


def test_sessions_under_another_rule_or_sampling_say_nothing(tmp_path: Path) -> None:
    """How much is kept depends on the rule and the sampling: a drafter that lost at D 0 may pay
    at D 1, so a TV-budget sweep's earlier runs never reroute its later ones."""
    from dataclasses import replace

    from specplay.engine.rules import RuleParams

    record(tmp_path, PROSE, speculative_s=4.0)
    record(tmp_path, PROSE, speculative_s=4.0)
    budget = config(tmp_path)
    budget = replace(budget, settings=budget.settings.changed(rule_params=RuleParams(tv_budget=1.0)))
    assert with_route_evidence(budget).route_map == {}
    assert with_route_evidence(config(tmp_path)).route_map == {"prose": "none"}


def test_each_turn_of_a_conversation_counts_with_its_own_prompts_class(tmp_path: Path) -> None:
    """A conversation's turns are routed one by one, so each is a measurement of its own prompt's
    class; they ran back to back, so a verdict still needs two sessions."""

    def lanes(speculative_s: float) -> dict:
        return {
            "speculative": speculative_events(seconds=speculative_s),
            "target": target_events(same_as_rounds(ROUNDS), seconds=2.0),
        }

    backend = {"backend": "mlx", "device": "cpu", "models": MODELS}
    later = [(PROSE, lanes(2.5)), (CODE, lanes(1.0))]  # 0.8× on prose, 2× on code
    write_session(tmp_path, lanes(4.0), prompt=PROSE, backend=backend, later_turns=later)
    records = route_records(config(tmp_path), recent_sessions(config(tmp_path)))
    assert sorted(records[("prose", "near")].speedups) == [0.5, 0.8] and records[("prose", "near")].sessions == 1
    assert records[("code", "near")].speedups == (2.0,)  # read from the last turn: only turn 0 reads none
    assert with_route_evidence(config(tmp_path)).route_map == {}  # one conversation met one machine's load
    record(tmp_path, PROSE, speculative_s=4.0)
    advised = with_route_evidence(config(tmp_path))
    assert advised.route_map == {"prose": "none"}
    assert advised.route_notes == {"prose": "near measured 0.50× on prose here (3 turns of 2 sessions)"}
