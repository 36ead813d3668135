"""What a learner met in the layout: the prompt library's list as wide as its descriptions, and a
lane that shows its last line when the run ends, its numbers explained where they stand."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Select

from specplay.ui.protocols import RunState
from specplay.ui.widgets.lane_view import LaneView
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_app, wait_for


async def test_the_prompt_library_lists_each_description_on_one_line(tmp_path: Path) -> None:
    app = scripted_app(scripted_backend(drafters=("near", "far")), tmp_path, prompt=CODE_PROMPT, raw=True)
    async with app.run_test(size=(180, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        library = app.query_one("#library", Select)
        library.expanded = True
        await pilot.pause()
        overlay = library.query_one("SelectOverlay")
        await wait_for(pilot, lambda: overlay.region.width > 0, "the list to open")
        region = overlay.region
        assert region.width >= 80 and app.screen.region.contains_region(region)  # wide, and on screen
        longest = max(len(p.label) for p in app.main.library)
        assert region.width >= min(longest + 4, 96)  # a description fits on its line (borders, padding)


async def test_a_finished_lane_shows_its_last_line(tmp_path: Path) -> None:
    app = scripted_app(
        scripted_backend(drafters=("near", "far")), tmp_path, prompt=CODE_PROMPT, raw=True, max_tokens=400
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.status.startswith("finished"), "the run to end", timeout_s=60)
        await pilot.pause()
        await pilot.pause()
        longer = 0
        for lane in ("speculative", "target"):
            scroll = app.query_one(f"#{lane}", LaneView).query_one(".lane-scroll")
            longer += scroll.max_scroll_y > 0  # the text is longer than the view
            assert scroll.scroll_y == scroll.max_scroll_y, (lane, scroll.scroll_y, scroll.max_scroll_y)
        assert longer
        # Every number the stats show says what it is where it stands: their tooltip names each.
        stats = app.query_one("#speculative", LaneView).query_one(".lane-stats")
        shown = str(stats.render())
        for name in ("tokens/s", "first token", "draft acceptance rate", "mean acceptance length", "a position"):
            assert name in shown and name in str(stats.tooltip), name
        assert "per-token acceptance α" in shown and "per-token acceptance α" in str(stats.tooltip)
