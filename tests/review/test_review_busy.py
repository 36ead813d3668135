"""A review page and transcript mark a measured speedup read on a busy machine, with why, by the
one definition `specplay run` and `specplay sessions` use (engine/disturbance.py); a session whose
lanes ran on a quiet machine, or were recorded before their drift was, says nothing of it."""

from __future__ import annotations

import html
import json
from pathlib import Path

from specplay.cli.sessions import summarize
from specplay.review import export_sessions
from specplay.store import load_session
from tests.support.disturbed import BUSY_TARGET, QUIET, lane_events
from tests.support.session_events import write_session

WHY = "the target-only lane's step moved by "
BUSY = f"busy: {WHY}"


def _session(folder: Path, *slows: tuple[float, float]) -> Path:
    """A session of one turn a slow phase, each later turn asked anew after it."""
    turns = [lane_events(slow) for slow in slows]
    later = [(f"and now turn {i + 2}", lanes) for i, lanes in enumerate(turns[1:])]
    return write_session(folder, turns[0], prompt="def fib(n):", later_turns=later)


def _summary_row(page: str, title: str) -> str:
    """The row of the page's summary table whose first cell is `title`."""
    return next(row for row in page.split("<tr>") if row.startswith(f"<td>{title}</td>"))


def test_a_disturbed_speedup_says_busy_and_why_in_the_page_and_the_transcript(tmp_path: Path) -> None:
    session = load_session(_session(tmp_path / "busy", BUSY_TARGET))
    reason = summarize(session)["disturbed_reason"]
    assert reason is not None and reason.startswith("the target-only lane's step moved by")
    page, transcript = export_sessions([session], "html"), export_sessions([session], "md")
    row = html.unescape(_summary_row(page, "speculative"))
    assert f"x {BUSY}" in row and reason in row  # next to the measured speedup, as `sessions` says it
    line = next(line for line in transcript.splitlines() if line.startswith("| speculative |"))
    assert f"x busy: {reason}" in line
    # the target-only column measures nothing against itself
    assert "busy" not in _summary_row(page, "target-only")


def test_a_quiet_speedup_and_a_session_without_drift_say_nothing(tmp_path: Path) -> None:
    quiet = load_session(_session(tmp_path / "quiet", QUIET))
    assert quiet.main.metrics["timing_drift"] == 0.0
    for document in ("html", "md"):
        assert "busy" not in export_sessions([quiet], document)
    # recorded before the drift was: the same busy lanes, the metric taken out of their records
    path = _session(tmp_path / "old", BUSY_TARGET)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for record in records:
        if record.get("kind") == "done":
            del record["data"]["metrics"]["timing_drift"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    old = load_session(path)
    assert old.measured_speedup is not None and summarize(old)["disturbed_reason"] is None
    for document in ("html", "md"):
        assert "busy" not in export_sessions([old], document)


def test_a_conversation_names_the_turn_whose_speedup_was_disturbed(tmp_path: Path) -> None:
    session = load_session(_session(tmp_path / "conversation", QUIET, BUSY_TARGET))
    page = html.unescape(export_sessions([session], "html"))
    first, second = page.split("<h2>Turn 2 of 2")[0].split("<h2>Turn 1 of 2")
    # the whole conversation's row names the turn; turn 1's own summary is quiet, turn 2's busy
    whole = first.split("<h2>The whole conversation")[1]
    assert f"x busy: turn 2: {WHY}" in whole and "turn 1:" not in whole
    assert "busy" not in second.split("<h3>Texts</h3>")[0]
    turn_2 = page.split("<h2>Turn 2 of 2")[1].split("<h3>Texts</h3>")[0]
    assert BUSY in turn_2 and "turn 2:" not in turn_2
