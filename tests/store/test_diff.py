"""`specplay diff`: token alignment, similarity, and the lossless greedy violation rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.diff import ONLY_A, ONLY_B, render_diff
from specplay.engine.events import ControlEvent, DoneEvent, FinishReason, StartEvent, Token, TokenSource
from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.store import LaneRecord, load_session
from specplay.store.diff import Opcode, first_divergence, is_lossless_greedy, token_diff, violation
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

# --- token_diff on hand-made sequences --------------------------------------------------------


def test_identical() -> None:
    diff = token_diff([1, 2, 3], [1, 2, 3])
    assert diff.opcodes == (Opcode("equal", 0, 3, 0, 3),)
    assert diff.similarity == 1.0 and diff.first_divergence is None and diff.identical


def test_one_insert() -> None:
    diff = token_diff([1, 2, 3], [1, 2, 9, 3])
    assert diff.opcodes == (Opcode("equal", 0, 2, 0, 2), Opcode("insert", 2, 2, 2, 3), Opcode("equal", 2, 3, 3, 4))
    assert diff.similarity == pytest.approx(1 - 1 / 4) and diff.first_divergence == 2


def test_one_delete() -> None:
    diff = token_diff([1, 2, 3, 4], [1, 3, 4])
    assert diff.opcodes == (Opcode("equal", 0, 1, 0, 1), Opcode("delete", 1, 2, 1, 1), Opcode("equal", 2, 4, 1, 3))
    assert diff.similarity == pytest.approx(1 - 1 / 4) and diff.first_divergence == 1


def test_a_replacement() -> None:
    diff = token_diff([1, 2, 3, 4, 5], [1, 2, 8, 9, 5])
    assert diff.opcodes == (Opcode("equal", 0, 2, 0, 2), Opcode("replace", 2, 4, 2, 4), Opcode("equal", 4, 5, 4, 5))
    assert diff.similarity == pytest.approx(1 - 2 / 5) and diff.first_divergence == 2


def test_first_divergence() -> None:
    assert first_divergence([7, 8], [7, 8, 9]) == 2  # one ends first
    assert first_divergence([7, 8, 9], [7, 8]) == 2
    assert first_divergence([1], [2]) == 0
    assert first_divergence([], []) is None
    empty = token_diff([], [4, 5])
    assert empty.opcodes == (Opcode("insert", 0, 0, 0, 2),) and empty.similarity == 0.0 and empty.first_divergence == 0
    assert token_diff([], []).similarity == 1.0


def test_opcodes_rebuild_b_from_a() -> None:
    a, b = [3, 1, 4, 1, 5, 9, 2, 6], [3, 1, 5, 9, 9, 2, 7, 6, 5]
    diff = token_diff(a, b)
    rebuilt: list[int] = []
    for op in diff.opcodes:
        rebuilt += a[op.a_start : op.a_end] if op.tag == "equal" else b[op.b_start : op.b_end]
    assert rebuilt == b
    assert diff.to_dict()["opcodes"][0] == {"tag": "equal", "a_start": 0, "a_end": 2, "b_start": 0, "b_end": 2}


# --- the violation rule ----------------------------------------------------------------------


def lane(
    token_ids: list[int],
    temperature: float = 0.0,
    tv_budget: float = 0.0,
    finish: FinishReason | None = "length",
    changes: list[ControlEvent] | None = None,
) -> LaneRecord:
    settings = SpecSettings(k=4, rule_params=RuleParams(tv_budget=tv_budget), sampling=SamplingParams(temperature))
    record = LaneRecord("speculative", tokens=tokens(token_ids, [""] * len(token_ids), "accepted"))
    record.add(StartEvent("speculative", "near", "near", (1,), 0, settings))
    record.changes = list(changes or [])
    if finish is not None:
        record.add(DoneEvent(finish, tuple(token_ids), "", {}))
    return record


def tokens(token_ids: list[int], texts: list[str], source: TokenSource) -> list[Token]:
    return [Token(i, text, source) for i, text in zip(token_ids, texts, strict=True)]


def check(main_lane: LaneRecord, baseline: LaneRecord) -> int | None:
    return violation(main_lane, baseline, token_diff(main_lane.token_ids, baseline.token_ids))


def test_lossless_greedy_is_temperature_0_and_no_budget() -> None:
    assert is_lossless_greedy(lane([]).settings)
    assert not is_lossless_greedy(lane([], temperature=0.7).settings)
    assert not is_lossless_greedy(lane([], tv_budget=0.1).settings)
    assert is_lossless_greedy(SpecSettings())


def test_a_lossless_greedy_run_may_not_diverge() -> None:
    assert check(lane([1, 2, 3]), lane([1, 2, 3])) is None
    assert check(lane([1, 2, 9, 4]), lane([1, 2, 3, 4])) == 2
    assert check(lane([1, 2], finish="stop"), lane([1, 2, 3])) == 2  # stopped where the target did not


def test_divergence_is_expected_when_sampling_or_spending_budget() -> None:
    assert check(lane([1, 9], temperature=1.0), lane([1, 2])) is None
    assert check(lane([1, 9], tv_budget=0.5), lane([1, 2])) is None


def test_divergence_after_a_live_change_to_a_lossy_setting_is_expected() -> None:
    budget_at_3 = [ControlEvent(1, (("k", 4, 2),)), ControlEvent(3, (("tv_budget", 0, 0.3),))]
    assert check(lane([1, 2, 3, 9], changes=budget_at_3), lane([1, 2, 3, 4])) is None
    assert check(lane([1, 9, 3, 9], changes=budget_at_3), lane([1, 2, 3, 4])) == 1
    sampling_at_2 = [ControlEvent(2, (("temperature", 0, 1.0),))]
    assert check(lane([1, 2, 9], changes=sampling_at_2), lane([1, 2, 3])) is None


def test_a_lane_cut_short_is_no_violation() -> None:
    assert check(lane([1, 2], finish=None), lane([1, 2, 3])) is None
    assert check(lane([1, 2], finish="cancelled"), lane([1, 2, 3])) is None
    assert check(lane([1, 2, 3]), lane([1], finish=None)) is None
    assert check(lane([1, 9], finish=None), lane([1, 2, 3])) == 1  # but a wrong token still is


# --- the rendered diff -----------------------------------------------------------------------


def test_render_marks_only_in_a_and_only_in_b() -> None:
    a = LaneRecord("a", tokens=tokens([1, 2, 3, 4], ["x", "y", "", "w"], "accepted"))
    b = LaneRecord("b", tokens=tokens([1, 5, 6, 4], ["x", "Y", "Z", "w"], "target"))
    text = render_diff(a, b, token_diff(a.token_ids, b.token_ids))
    assert text.plain == "xyYZw"
    styles = [(text.plain[span.start : span.end], span.style) for span in text.spans]
    assert styles == [("y", ONLY_A), ("YZ", ONLY_B)]


def test_render_shows_a_changed_token_without_text_by_id() -> None:
    # Its bytes are held back for a later token; a change made only of such tokens would vanish.
    a = LaneRecord("a", tokens=tokens([1, 2, 3], ["x", "", "w"], "accepted"))
    b = LaneRecord("b", tokens=tokens([1, 3], ["x", "w"], "target"))
    assert render_diff(a, b, token_diff(a.token_ids, b.token_ids)).plain == "x⟨2⟩w"


def test_render_defuses_terminal_control_bytes() -> None:
    a = LaneRecord("a", tokens=tokens([1, 2], ["\x1b[2J", "\x9b\n\t\x7f"], "accepted"))
    b = LaneRecord("b", tokens=tokens([1, 3], ["\x1b[2J", "\x07"], "target"))
    assert render_diff(a, b, token_diff(a.token_ids, b.token_ids)).plain == "␛[2J\\x9b\n\t␡␇"


# --- the command -----------------------------------------------------------------------------


def diff(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, out, err


def diverging_rounds() -> list[list[Token]]:
    """ROUNDS with the bonus token (index 2) swapped for another."""
    return [[*ROUNDS[0][:2], Token(99, "[", "bonus")], ROUNDS[1]]


def test_a_faithful_run_against_its_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_session(tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    code, out, err = diff(capsys, path.stem, "--sessions-dir", str(tmp_path))
    assert code == 0 and err == ""
    assert "def fib(n):" in out
    assert out.splitlines()[-1] == "similarity 1.000 · identical · A 5 tokens, B 5 tokens"


def test_a_lossless_greedy_run_that_diverged_is_a_violation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lanes = {"speculative": speculative_events(diverging_rounds()), "target": target_events(same_as_rounds())}
    path = write_session(tmp_path, lanes)
    code, out, _ = diff(capsys, str(path))
    assert code == 1
    assert "similarity 0.800 · first divergence at token 2 · A 5 tokens, B 5 tokens" in out
    assert out.splitlines()[-1] == "VIOLATION: lossless greedy run diverged at token 2"
    code, out, _ = diff(capsys, str(path), "--json")
    result = json.loads(out)
    assert code == 1 and result["violation"] == 2 and result["lossless_greedy"] is True
    assert result["similarity"] == pytest.approx(0.8) and result["first_divergence"] == 2
    assert result["a"] == {"session": path.stem, "lane": "speculative", "num_tokens": 5, "complete": True}
    assert result["b"]["lane"] == "target"
    assert {"tag": "replace", "a_start": 2, "a_end": 3, "b_start": 2, "b_end": 3} in result["opcodes"]


def test_a_greedy_divergence_through_vllm_says_its_passes_are_not_bit_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lanes = {"speculative": speculative_events(diverging_rounds()), "target": target_events(same_as_rounds())}
    path = write_session(tmp_path, lanes)
    header, *rest = path.read_text().splitlines()
    path.write_text("\n".join([json.dumps(json.loads(header) | {"backend": {"backend": "vllm"}}), *rest]) + "\n")
    code, out, _ = diff(capsys, str(path))
    assert code == 1 and "VIOLATION: lossless greedy run diverged at token 2" in out
    assert "greedy can flip" in out.replace("\n", " ")


def test_a_sampled_run_may_diverge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lanes = {
        "speculative": speculative_events(diverging_rounds(), temperature=1.0),
        "target": target_events(same_as_rounds(), temperature=1.0),
    }
    code, out, _ = diff(capsys, str(write_session(tmp_path, lanes)))
    assert code == 0 and "first divergence at token 2" in out and "VIOLATION" not in out


def test_a_live_budget_change_before_the_divergence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    change = ControlEvent(0, (("tv_budget", 0.0, 0.5),))
    lanes = {
        "speculative": speculative_events(diverging_rounds(), changes=[change]),
        "target": target_events(same_as_rounds()),
    }
    code, out, _ = diff(capsys, str(write_session(tmp_path, lanes)), "--json")
    assert code == 0 and json.loads(out)["violation"] is None


def test_two_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_session(tmp_path, {"speculative": speculative_events()})
    b = write_session(tmp_path, {"speculative": speculative_events(diverging_rounds())})
    code, out, _ = diff(capsys, str(a), str(b), "--json")
    result = json.loads(out)
    # Different runs promise nothing to each other: a difference is reported, never a violation.
    assert code == 0 and result["first_divergence"] == 2 and result["violation"] is None
    assert result["a"]["session"] == a.stem and result["b"]["session"] == b.stem
    code, out, _ = diff(capsys, str(a), str(b))
    assert code == 0 and f"A {a.stem} speculative → B {b.stem} speculative" in out


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_baseline = write_session(tmp_path, {"speculative": speculative_events()})
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text('{"type": "header", "schema_version": 1, "lanes": []}\nnot json\n{"type": "end"}\n')
    no_lanes = tmp_path / "no_lanes.jsonl"
    header = '{"type": "header", "schema_version": 1, "prompt": "x", "prompt_token_ids": [1], "lanes": []}'
    no_lanes.write_text(header + '\n{"type": "end"}\n')
    cases = [
        (["missing", "--sessions-dir", str(tmp_path)], "no session 'missing'"),
        ([str(corrupt)], "line 2 is not JSON"),
        ([str(no_baseline)], "has no target-only lane to compare with"),
        ([str(no_baseline), str(no_lanes)], "its header names no lanes"),
    ]
    for args, message in cases:
        code, out, err = diff(capsys, *args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("specplay: error: ") and message in err
    assert "give a second session B" in diff(capsys, str(no_baseline))[2]


def test_saved_session_lanes_line_up(tmp_path: Path) -> None:
    session = load_session(write_session(tmp_path, {"speculative": speculative_events(), "target": []}, finalize=False))
    assert session.baseline is not None and session.baseline.token_ids == []
    assert check(session.main, session.baseline) is None  # the baseline never ran: nothing to violate
