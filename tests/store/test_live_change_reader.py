"""Recorded live changes that these settings do not take (a newer specplay's setting, an edited
value) are skipped by every reader that applies them, with one line each saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specplay.cli import main
from specplay.engine.events import ControlEvent
from specplay.engine.settings import SpecSettings
from specplay.store import load_session
from specplay.store.changes import settings_after, skipped_changes
from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

HOSTILE = [("bogus", 2), ("k", "x"), ("k", 0), ("temperature", -1), ("temperature", "x"), ("rule", "nope"), ("k", {})]


def test_each_change_is_applied_or_skipped_in_one_line() -> None:
    event = ControlEvent(3, (("k", 4, 2), ("bogus", 1, 2), ("k", 2, "x"), ("temperature", 0.0, 0.5), ("rule", "", "?")))
    after = settings_after(SpecSettings(), event)
    assert after.settings.k == 2 and after.settings.sampling.temperature == 0.5 and after.settings.rule == "mentored"
    assert after.skipped == (
        "token 3: a live change was skipped: 'bogus' is not a setting this specplay knows",
        "token 3: a live change was skipped: k is 'x', not a whole number",
        "token 3: a live change was skipped: rule must be one of mentored, typical, lenience, cascade (got '?')",
    )


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_export_diff_and_sessions_read_a_change_they_cannot_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, value: Any
) -> None:
    target = same_as_rounds()
    target[-1] = (99, " other")  # the lanes part after the change: diff asks whether a change explains it
    change = ControlEvent(3, ((name, None, value),))
    lanes = {"speculative": speculative_events(changes=[change]), "target": target_events(target)}
    path = write_session(tmp_path, lanes)
    assert len(skipped_changes(load_session(path).lanes.values())) == 1
    for args in (["export", str(path)], ["export", str(path), "--format", "html"], ["sessions"]):
        assert main([*args, "--sessions-dir", str(tmp_path)]) == 0, args
    # The bad change was not applied: the lane stayed greedy and lossless, so its divergence is one.
    assert main(["diff", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "VIOLATION: lossless greedy run diverged at token 4" in out
    # ...and diff says which change it could not read, so a reader can weigh the violation.
    assert "speculative lane, token 3: a live change was skipped: " in out
    assert "(the lossless check read the settings without it)" in out
    assert main(["diff", str(path), "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert len(record["skipped_changes"]) == 1 and record["violation"] == 4
