"""A conversation's session: each later turn opens with a turn record, every reader that sums a
session's rounds reads every turn, and a conversation cut short reads as far as it went."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.sessions import summarize
from specplay.engine.conversation import Exchange
from specplay.engine.events import Token
from specplay.store import load_session
from specplay.train.prompts import TrainingPrompt, read_prompts
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

PROMPTS = ("def fib(n):", "now make it iterative", "and add a docstring")
# Each turn its own rounds: turn 0 as ROUNDS (two of four drafts kept), turn 1 every draft kept,
# turn 2 none kept, so any reader of one turn alone gets other sums.
TURN_ROUNDS = [
    ROUNDS,
    [[Token(20, " a", "accepted"), Token(21, " b", "accepted"), Token(22, " c", "accepted"), Token(23, "!", "bonus")]],
    [[Token(30, " x", "corrected")], [Token(31, " y", "corrected")]],
]


def turn_lanes(rounds: list[list[Token]], speculative_s: float = 1.0) -> dict[str, list]:
    return {
        "speculative": speculative_events(rounds, seconds=speculative_s),
        "target": target_events(same_as_rounds(rounds)),
    }


def write_conversation(directory: Path, **options: object) -> Path:
    lanes = [turn_lanes(rounds) for rounds in TURN_ROUNDS]
    later = list(zip(PROMPTS[1:], lanes[1:], strict=True))
    return write_session(directory, lanes[0], prompt=PROMPTS[0], later_turns=later, **options)  # type: ignore[arg-type]


def test_a_conversation_round_trips_turn_by_turn(tmp_path: Path) -> None:
    path = write_conversation(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r for r in records if r["type"] == "turn"] == [
        {"type": "turn", "turn": 1, "prompt": PROMPTS[1]},
        {"type": "turn", "turn": 2, "prompt": PROMPTS[2]},
    ]
    session = load_session(path)
    assert session.complete and [t.prompt for t in session.turns] == list(PROMPTS)
    assert [t.index for t in session.turns] == [0, 1, 2]
    for turn, rounds in zip(session.turns, TURN_ROUNDS, strict=True):
        assert list(turn.lanes) == ["speculative", "target"]
        assert turn.main.name == "speculative" and turn.baseline is turn.lanes["target"]
        ids = [t.token_id for r in rounds for t in r]
        assert turn.main.token_ids == ids == turn.lanes["target"].token_ids
        assert len(turn.main.rounds) == len(rounds) and turn.main.complete
    # The first turn is what a reader of one prompt reads; main_lanes is every turn's.
    assert session.lanes is session.turns[0].lanes and session.main is session.turns[0].main
    assert session.main_lanes == [t.main for t in session.turns]
    assert session.token_texts[31] == " y"  # a later turn's token is named too


def test_a_conversation_cut_short_in_its_last_turn_reads_incomplete(tmp_path: Path) -> None:
    first, second = (turn_lanes(rounds) for rounds in TURN_ROUNDS[:2])
    cut = {"speculative": speculative_events(TURN_ROUNDS[2], finish=None)}  # no done, no target-only lane
    path = write_session(
        tmp_path, first, prompt=PROMPTS[0], later_turns=[(PROMPTS[1], second), (PROMPTS[2], cut)], finalize=False
    )
    session = load_session(path)
    assert not session.complete and len(session.turns) == 3
    assert [t.main.complete for t in session.turns] == [True, True, False]
    assert session.turns[2].main.token_ids == [30, 31] and session.turns[2].baseline is not None
    assert session.turns[2].baseline.start is None  # listed by the header, never run
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0


def test_sessions_shows_the_turns_and_sums_acceptance_over_all_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation = write_conversation(tmp_path / "c")
    single = write_session(tmp_path / "c", turn_lanes(ROUNDS), prompt="one prompt")
    assert main(["sessions", "--sessions-dir", str(tmp_path / "c"), "--json"]) == 0
    rows = {row["id"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    row, alone = rows[conversation.stem], rows[single.stem]
    assert row["turns"] == 3 and alone["turns"] == 1
    metrics = [lane.metrics for lane in load_session(conversation).main_lanes]
    accepted = sum(m["num_accepted_draft_tokens"] for m in metrics)
    drafted = sum(m["num_draft_tokens"] for m in metrics)
    rounds = sum(m["num_spec_steps"] for m in metrics)
    assert row["draft_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert row["mean_acceptance_length"] == pytest.approx(1 + accepted / rounds)
    assert row["draft_acceptance_rate"] != pytest.approx(alone["draft_acceptance_rate"])  # turn 0 alone differs
    # One prompt: its own lane's metrics and speedup, as before conversations.
    one = load_session(single)
    assert alone["draft_acceptance_rate"] == one.main.metrics["draft_acceptance_rate"]
    assert alone["speedup"] == one.measured_speedup and alone["similarity_to_target"] == 1.0
    assert row["similarity_to_target"] == 1.0 and row["speedup"] is not None
    capsys.readouterr()
    assert main(["sessions", "--sessions-dir", str(tmp_path / "c")]) == 0
    listed = capsys.readouterr().out
    assert "[3 turns] def fib" in listed and "[1 turns]" not in listed and "one prompt" in listed


def test_a_conversations_speedup_weighs_each_turn_by_its_time(tmp_path: Path) -> None:
    """Turn 0 at 2×, turn 1 at 0.5× (5 tokens each, at 4 and 1 tokens/s against target-only's 2):
    each turn's tokens at its rate take 6.25 s speculatively and 5 s target-only, 0.8×; not the
    mean of the two speedups (1.25×)."""
    lanes = [turn_lanes(ROUNDS, speculative_s=1.0), turn_lanes(ROUNDS, speculative_s=4.0)]
    path = write_session(tmp_path, lanes[0], later_turns=[("again", lanes[1])])
    row = summarize(load_session(path))
    assert row["speedup"] == pytest.approx(4 / 5)


def test_distill_reads_every_turn_after_its_earlier_exchanges(tmp_path: Path) -> None:
    path = write_conversation(tmp_path)
    answers = [lane.text for lane in load_session(path).main_lanes]
    assert read_prompts(tmp_path) == [
        TrainingPrompt(PROMPTS[0]),
        TrainingPrompt(PROMPTS[1], (Exchange(PROMPTS[0], answers[0]),)),
        TrainingPrompt(PROMPTS[2], (Exchange(PROMPTS[0], answers[0]), Exchange(PROMPTS[1], answers[1]))),
    ]
