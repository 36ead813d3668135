"""The playground opens a session whose live changes it cannot apply: a setting it does not know
(a newer specplay's, or an edit) is shown and skipped, a bad value is named in one status line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specplay.engine.events import ControlEvent
from specplay.engine.settings import SpecSettings
from specplay.ui.protocols import RunState
from specplay.ui.widgets.lane_view import LaneView
from tests.support.scripted import scripted_backend
from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session
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
