"""The playground opens a session whose live changes it cannot apply: a setting it does not know
(a newer specplay's, or an edit) is shown and skipped, a bad value is named in one status line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specplay.engine.events import ControlEvent
from specplay.engine.settings import SpecSettings
from specplay.ui.protocols import RunState
from specplay.ui.widgets.inspector import Inspector
from specplay.ui.widgets.lane_view import LaneView
from tests.support.scripted import scripted_backend
from tests.support.session_events import (
    same_as_rounds,
    speculative_events,
    target_events,
    write_session,
    write_tree_session,
)
from tests.support.ui_helpers import scripted_app, wait_for

HOSTILE_CHANGES: list[tuple[str, Any, str]] = [
    ("bogus", 2, "'bogus' is not a setting this specplay knows"),
    ("k", "x", "k is 'x', not a whole number"),
    ("k", 0, "k must be between 1 and 64 (got 0)"),
    ("temperature", -1, "temperature must be 0 or more and finite (got -1"),
    ("rule", "nope", "rule must be one of"),
    ("policy", "nope", "policy is 'nope', not one of"),
]


def _session_with_change(directory: Path, name: str, value: Any) -> Path:
    """A finished session whose speculative lane changes `name` to `value` before its second round."""
    change = ControlEvent(3, ((name, None, value), ("k", 4, 2)))
    lanes = {"speculative": speculative_events(changes=[change]), "target": target_events(same_as_rounds())}
    return write_session(directory, lanes)


@pytest.mark.parametrize(("name", "value", "named"), HOSTILE_CHANGES)
async def test_a_live_change_it_cannot_apply_is_shown_skipped_and_named(
    tmp_path: Path, name: str, value: Any, named: str
) -> None:
    saved = _session_with_change(tmp_path / "sessions", name, value)
    app = scripted_app(scripted_backend(drafters=("near", "far")), tmp_path / "sessions", raw=True, open_session=saved)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.pause()
        status = app.playground.status
        assert named in status and "token 3" in status and "skipped" in status, status
        assert "\n" not in status
        assert f"⟨{name}=" in app.query_one("#speculative", LaneView).text  # shown where it was recorded
        # The good change beside it still took effect; the bad one left the settings as they were.
        tally = app.playground.tallies["speculative"]
        assert tally.settings is not None and tally.settings.k == 2
        assert tally.settings.sampling.temperature == 0.0 and tally.settings.rule == SpecSettings().rule
        assert app.playground.settings == SpecSettings()  # the start settings, ready to re-run
    assert app.crash is None


async def test_a_tree_round_without_its_judgements_opens_and_every_token_drills_down(tmp_path: Path) -> None:
    """A round that names its layout but not how each node was judged (a speculating server's, or
    an edit): the tape and the drill-down show what there is, token by token, and nothing crashes."""
    sessions = tmp_path / "sessions"
    saved = write_tree_session(sessions)
    records = [json.loads(line) for line in saved.read_text(encoding="utf-8").split("\n") if line]
    for record in records:
        if record.get("kind") == "round" and record["lane"] == "speculative":
            record["data"].update(positions=[])
    saved.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    app = scripted_app(scripted_backend(drafters=("near", "far")), sessions, raw=True, open_session=saved)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        lane, inspector = app.query_one("#speculative", LaneView), app.query_one(Inspector)
        assert lane.picks and any(pick.round is not None for pick in lane.picks)
        for pick in lane.picks:
            lane.select(pick.index)
            await pilot.pause()
            assert inspector.pick is not None and inspector.pick.index == pick.index
            shown = str(inspector.render())
            assert f"#{pick.index}" in shown
            if pick.round is not None and pick.token.source != "bonus":
                assert "how its draft was judged is not recorded" in shown, shown
    assert app.crash is None
