"""The status line is read whole at 200 columns, beside the controls panel: the ready line's
"ctrl+r runs" and the finished line's saved session, wrapped at words where they are long."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from specplay.engine.settings import SpecSettings
from specplay.ui.app import PlaygroundApp
from specplay.ui.protocols import RunState
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_app, wait_for


def _shown(app: PlaygroundApp) -> str:
    """The status line's text as drawn on screen, its lines joined, and checked clear of the panel."""
    status, side = app.main.query_one("#status", Static), app.main.query_one("#side")
    assert status.region.right <= side.region.x  # nothing of it under the controls panel
    strips = status.render_lines(status.region.reset_offset)
    return " ".join(" ".join(strip.text.split()) for strip in strips).strip()


async def test_the_ready_and_finished_lines_are_whole_at_200_columns(tmp_path: Path) -> None:
    backend = scripted_backend(drafters=("near", "far", "lookup"))
    app = scripted_app(
        backend, tmp_path, prompt=CODE_PROMPT, max_tokens=12, raw=True, settings=SpecSettings(route="auto")
    )
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the models to load")
        await pilot.pause()
        assert app.playground.status.endswith("; ctrl+r runs")
        assert _shown(app) == " ".join(app.playground.status.split())
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to be saved")
        await wait_for(pilot, lambda: app.playground.status.startswith("finished"), "the finished line")
        await pilot.pause()
        status = app.playground.status
        assert app.playground.last_session is not None and app.playground.last_session.name in status
        assert len(status) > app.main.query_one("#status").content_region.width  # long enough to wrap
        assert _shown(app) == " ".join(status.split())
