"""`specplay diff` of conversations: turn i against turn i, what differs in the prompts or the
number of turns said, and the lossless promise checked turn by turn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.engine.events import Token
from specplay.store import load_session
from specplay.store.diff import token_diff
from tests.support.conversations import FIXTURE_PROMPTS, fixture_config, record_conversation
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

OTHER_SECOND = "\n\ndef add(a, b):"
"""Turn 2 asked differently from the fixture's conversation."""


@pytest.fixture(scope="module")
def conversations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """Two real conversations on the demo models with one seed, sampled: the second asks turn 2 differently."""
    import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core, as the CLI does)
    from specplay.backends import open_stream

    folder = tmp_path_factory.mktemp("conversations")
    config = fixture_config(folder)
    source = open_stream(config)
    try:
        a = record_conversation(source, config, FIXTURE_PROMPTS)
        b = record_conversation(source, config, (FIXTURE_PROMPTS[0], OTHER_SECOND, FIXTURE_PROMPTS[2]))
    finally:
        source.close()
    yield a, b


def diff(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_two_conversations_turn_by_turn(conversations: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = conversations
    session_a, session_b = load_session(a), load_session(b)
    code, out, _ = diff(capsys, str(a), str(b), "--json")
    result = json.loads(out)
    assert code == 0 and result["a"]["num_turns"] == result["b"]["num_turns"] == 3
    first, second, third = result["turns"]
    assert [t["turn"] for t in result["turns"]] == [0, 1, 2]
    # turn 1: the same prompt and seed on the same models, so the same text
    assert first["same_prompt"] and first["identical"] and first["similarity"] == 1.0
    assert session_a.turns[0].main.token_ids == session_b.turns[0].main.token_ids
    # turn 2: asked differently, said so, and the texts compared as they are
    assert not second["same_prompt"] and not second["identical"]
    assert (second["prompt_a"], second["prompt_b"]) == (FIXTURE_PROMPTS[1], OTHER_SECOND)
    expected = token_diff(session_a.turns[1].main.token_ids, session_b.turns[1].main.token_ids)
    assert second["first_divergence"] == expected.first_divergence is not None
    assert second["similarity"] == pytest.approx(expected.similarity) and second["same_earlier_turns"]
    # turn 3: the same prompt, asked after a different turn 2
    assert third["same_prompt"] and not third["same_earlier_turns"]
    assert not result["identical"] and result["violation"] is None and not result["lossless_greedy"]

    code, out, _ = diff(capsys, str(a), str(b))
    assert code == 0
    assert "Turn 1 of 3 · ‹def fib(n):›" in out and "Turn 2 of 3 · ‹⏎⏎def fact(n):›" in out
    assert "the prompts differ: B asked ‹⏎⏎def add(a, b):›" in out
    assert out.count("asked after different earlier turns") == 1  # turn 3 only
    verdict = out.splitlines()[-1]
    assert verdict.startswith("conversation: 3 turns · identical in turn 1 · turn 2 differs (")
    assert "asked differently" in verdict
    # each turn's own numbers, as a single run's diff prints them
    assert f"first divergence at token {expected.first_divergence} · A " in out


def test_a_conversation_against_its_own_target_only_lane(
    conversations: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = conversations
    session = load_session(a)
    code, out, _ = diff(capsys, str(a), "--json")
    result = json.loads(out)
    assert code == 0 and result["b"] == {"session": session.id, "lane": "target", "num_turns": 3, "complete": True}
    for turn, compared in zip(session.turns, result["turns"], strict=True):
        assert turn.baseline is not None
        expected = token_diff(turn.main.token_ids, turn.baseline.token_ids)
        assert compared["first_divergence"] == expected.first_divergence
        assert compared["num_tokens_a"] == len(turn.main.tokens) and compared["b"]["lane"] == "target"
    # sampled (T 0.8, D 0.4): no promise to keep, and the lanes' conversations part
    assert not result["lossless_greedy"] and result["violation"] is None


def test_conversations_of_different_lengths(
    conversations: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, _ = conversations
    short = write_session(tmp_path, {"speculative": speculative_events()}, prompt=FIXTURE_PROMPTS[0])
    code, out, _ = diff(capsys, str(a), str(short), "--json")
    result = json.loads(out)
    assert code == 0 and [t["b"] is None for t in result["turns"]] == [False, True, True]
    assert result["turns"][1]["prompt_b"] is None and not result["identical"]
    code, out, _ = diff(capsys, str(a), str(short))
    assert out.count("only A has this turn (B has 1 turn)") == 2
    assert out.splitlines()[-1].endswith("· not compared: turns 2, 3")
    code, out, _ = diff(capsys, str(short), str(a))
    assert out.count("only B has this turn (A has 1 turn)") == 2


def _greedy_turn(rounds: list[list[Token]]) -> dict:
    return {"speculative": speculative_events(rounds), "target": target_events(same_as_rounds(ROUNDS))}


def test_a_lossless_greedy_conversation_is_checked_turn_by_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = [[*ROUNDS[0][:2], Token(99, "[", "bonus")], ROUNDS[1]]
    faithful = write_session(
        tmp_path, _greedy_turn(ROUNDS), later_turns=[("again", _greedy_turn(ROUNDS)), ("more", _greedy_turn(ROUNDS))]
    )
    code, out, _ = diff(capsys, str(faithful), "--json")
    result = json.loads(out)
    assert code == 0 and result["identical"] and result["lossless_greedy"]
    assert [t["lossless_greedy"] for t in result["turns"]] == [True, True, True]

    broken = write_session(
        tmp_path, _greedy_turn(ROUNDS), later_turns=[("again", _greedy_turn(wrong)), ("more", _greedy_turn(wrong))]
    )
    code, out, _ = diff(capsys, str(broken), "--json")
    result = json.loads(out)
    assert code == 1 and (result["violation_turn"], result["violation"]) == (1, 2)
    # turn 3 was asked after a turn 2 whose answers differ: no longer a promise, so no second violation
    assert [t["violation"] for t in result["turns"]] == [None, 2, None]
    assert [t["lossless_greedy"] for t in result["turns"]] == [True, True, False]
    code, out, _ = diff(capsys, str(broken))
    assert code == 1 and out.splitlines()[-1] == "VIOLATION: lossless greedy run diverged in turn 2 at token 2"
