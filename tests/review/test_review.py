"""Reviews without a browser: the alignment of columns to the target-only text, the summary's
numbers, sweeps of several sessions, and what `specplay export` refuses."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.engine.events import Token
from specplay.review import review_sessions
from specplay.review.columns import aligned_starts, divergence, segment_starts
from specplay.review.html import to_html
from specplay.review.markdown import to_markdown
from specplay.review.summary import column_numbers, settings
from specplay.store import load_session
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session


def test_rows_start_after_line_breaks_and_long_sentences() -> None:
    texts = ["a", "\n", "b", "."] + ["w"] * 3 + ["."] + ["x"] * 2
    assert segment_starts(texts, min_sentence_tokens=4) == [0, 2, 8]  # "b." is too short to close a row
    assert segment_starts([]) == [0] and segment_starts(["\n"]) == [0]


def test_rows_carry_into_a_column_through_the_alignment() -> None:
    reference = [1, 2, 3, 4, 5, 6, 7, 8]
    column = [9, 1, 2, 30, 4, 5, 7, 8, 10]  # an extra token first, 3 replaced, 6 missing, one more at the end
    against = divergence(column, reference)
    assert against.changed == {0, 3, 8}
    assert dict(against.gaps) == {6: (5, 6)}  # before its token 6 the reference has token 5 (value 6)
    # reference rows start at 0, 2 (token 3), 5 (token 6) and 6 (token 7)
    assert aligned_starts([0, 2, 5, 6], against) == [0, 3, 6, 6]
    assert aligned_starts([0, 4], None) == [0, 4]


def test_single_session_summary(tmp_path: Path) -> None:
    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    review = review_sessions([load_session(write_session(tmp_path, lanes))])
    (group,) = review.groups
    reference, speculative = group.columns
    assert group.reference is reference and reference.kind == "target" and reference.title == "target-only"
    numbers = column_numbers(speculative, reference)
    # 4 tokens after the first in 1 s against 4 in 2 s; each target step took 1 ms; 3 of 4 drafts accepted
    assert numbers.measured_speedup == pytest.approx(2.0) and numbers.tokens == 5
    assert numbers.draft_acceptance_rate == 0.75 and numbers.mean_acceptance_length == 2.5
    assert numbers.similarity == 1.0 and numbers.first_divergence is None
    assert numbers.predicted_speedup is not None and numbers.predicted_speedup > 1
    assert group.summary_rows()[1][:6] == ["speculative", "5", "0.75", "2.50", "4.0", "2.00x"]


def test_several_sessions_line_up_against_the_first_target_only_text(tmp_path: Path) -> None:
    baseline = target_events(same_as_rounds())
    other = [[Token(10, "def", "accepted"), Token(99, " fob", "corrected")], [Token(12, "(", "bonus")]]
    paths = [
        write_session(tmp_path, {"speculative": speculative_events(tv_budget=0.0), "target": baseline}),
        write_session(tmp_path, {"speculative": speculative_events(other, tv_budget=0.5)}),
        write_session(
            tmp_path, {"speculative": speculative_events(tv_budget=1.0), "target": target_events([(1, "x")])}
        ),
    ]
    sessions = [load_session(p) for p in paths]
    review = review_sessions(sessions)
    (group,) = review.groups
    assert [c.title for c in group.columns] == [f"target-only ({sessions[0].id})", "D 0", "D 0.5", "D 1"]
    assert group.reference is group.columns[0] and group.reference.lane is sessions[0].baseline
    assert group.columns[2].divergence is not None and group.columns[2].divergence.diff.first_divergence == 1
    assert ("tv_budget", "0.5") in review.column_settings["c2"] and ("tv_budget", "0") not in review.settings
    # the third run's own target-only text is not the reference's: a reader is told
    assert any(sessions[2].id in note and "differs from the reference from token 0" in note for note in review.notes)


def test_each_runs_speedup_divides_by_its_own_target_only_lane(tmp_path: Path) -> None:
    """On a page of several sessions a run's speedup is the one its session records (and `specplay
    sessions` lists), not one against another run's target-only lane; the page says so."""
    paths = [
        write_session(
            tmp_path, {"speculative": speculative_events(tv_budget=0.0), "target": target_events(same_as_rounds())}
        ),
        write_session(
            tmp_path, {"speculative": speculative_events(tv_budget=1.0), "target": target_events([(1, "x")] * 9)}
        ),
    ]
    sessions = [load_session(p) for p in paths]
    review = review_sessions(sessions)
    (group,) = review.groups
    for column, session in zip(group.columns[1:], sessions, strict=True):
        shown = column_numbers(column, group.reference, group.baselines.get(column.key)).measured_speedup
        assert shown == pytest.approx(session.measured_speedup)
    assert any("its own target-only lane" in note for note in review.notes)


def test_code_keeps_its_indentation_row_by_row() -> None:
    """Rows start after line breaks; a token holding a line break and the next line's indentation
    ("\\n    ") opens the next row with that indentation, so each row of code reads as its line."""
    fixture = Path(__file__).resolve().parents[1] / "data" / "saved_sessions" / "run-greedy-lossless.jsonl"
    session = load_session(fixture)
    page = to_html(review_sessions([session]))
    text = session.main.text
    lines = set(text.split("\n"))
    cells = re.findall(r'<div class="cell" data-col="c1"[^>]*>(.*?)</div>', page, re.S)
    shown = [html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in cells]
    assert "".join(shown) == text  # nothing lost or doubled
    indented = [cell for cell in shown[1:] if cell.startswith(" ")]
    assert indented and all(cell.split("\n")[0] in lines for cell in indented), indented
    assert any(cell.startswith("        ") for cell in indented)  # an eight-space line keeps its eight


def test_export_refuses_what_it_cannot_line_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = write_session(tmp_path, {"speculative": speculative_events(ROUNDS)}, prompt="first")
    two = write_session(tmp_path, {"speculative": speculative_events(ROUNDS)}, prompt="second")
    assert main(["export", str(one), str(two), "--format", "html"]) != 0
    err = capsys.readouterr().err
    assert "ran different prompts" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["export", str(one), str(one), "--format", "jsonl"]) != 0
    assert "one session's raw log" in capsys.readouterr().err


def test_a_tokens_details_name_its_round_its_numbers_and_the_top_candidates(tmp_path: Path) -> None:
    from dataclasses import replace

    from specplay.engine.events import RoundEvent
    from specplay.review.html import token_details

    events = speculative_events()
    first = next(e for e in events if isinstance(e, RoundEvent))
    with_tops = replace(
        first,
        positions=(replace(first.positions[0], top_target=((10, 0.5), (77, 0.25)), top_draft=((10, 0.5),)),
                   *first.positions[1:]),
        bonus_top_target=((12, 0.4),),
    )  # fmt: skip
    events[events.index(first)] = with_tops
    review = review_sessions([load_session(write_session(tmp_path, {"speculative": events}))])
    (column,) = review.groups[0].columns
    details = token_details(column, 0, {77: " seventy"})
    assert details.splitlines()[0] == "‹def›  accepted · token 0 · id 10"
    assert "round 0 · route near · k 2 · accepted 2" in details
    assert "p_target(x) 0.500 · p_draft(x) 0.500" in details and "u 0.100" in details and "θ 0.000" in details
    assert "top p_target: ⟨10⟩ 0.500, ‹ seventy› 0.250" in details and "top p_draft: ⟨10⟩ 0.500" in details
    bonus = token_details(column, 2, {})
    assert "bonus" in bonus and "p_target(x) 0.400" in bonus and "top p_target: ⟨12⟩ 0.400" in bonus


def test_a_change_of_drafter_between_rounds_is_marked_where_it_took_effect(tmp_path: Path) -> None:
    """Adaptive routing: the second round drafted by far, marked before its first token in the
    page and the transcript, and the drafters that served listed with the settings."""
    lanes = {"speculative": speculative_events(routes=["near", "far"]), "target": target_events(same_as_rounds())}
    session = load_session(write_session(tmp_path, lanes))
    assert session.main.route_switches == {3: "far"}
    (group,) = review_sessions([session]).groups
    assert group.columns[1].switches == {3: "far"}
    assert ("drafter", "near 1 round, far 1 round (1 switch)") in settings(session)
    page = to_html(review_sessions([session]))
    mark = '<span class="switch" data-at="3" title="from token 3 the rounds are drafted by far">⟨→far⟩</span>'
    assert mark + '<span class="t relaxed" data-i="3"' in page
    assert "<kbd>⟨→far⟩</kbd>" in to_markdown(review_sessions([session]))
