"""What a learner met in the layout: the prompt library's list as wide as its descriptions, a
lane that shows its last line when the run ends, its numbers explained where they stand, and
every line of its stats drawn whatever the terminal's size (the text gives way first)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Select

from specplay.engine.settings import SpecSettings
from specplay.ui.protocols import RunState
from specplay.ui.widgets.lane_view import MIN_TEXT_ROWS, LaneView
from specplay.ui.widgets.stats_view import StatsBox, StatsText
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import Cost, ScriptedBackend, ScriptedModel, scripted_backend, seeded
from tests.support.ui_helpers import drawn, scripted_app, wait_for


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


@pytest.mark.parametrize(
    ("size", "draft_lane"), [((200, 50), False), ((200, 50), True), ((120, 40), False), ((80, 24), False)]
)
async def test_every_stats_line_is_drawn_and_the_text_gives_way_first(
    tmp_path: Path, size: tuple[int, int], draft_lane: bool
) -> None:
    """A drafter that loses (its own distribution, at 0.8 of the target's cost): the speculative
    stats end with the loss line. Each lane's stats sit inside the lane, every line drawn: all at
    once where the lane has the rows (200x50, with the draft-only lane too), else the text keeps
    one row and the stats scroll, with a scrollbar, through every line to the last."""
    target = ScriptedModel("target", seeded(0), Cost(step_ms=10.0, row_ms=1.0))
    dear = ScriptedModel("dear", seeded(1), Cost(step_ms=8.0, row_ms=1.0))
    backend = ScriptedBackend(target, [dear])
    app = scripted_app(
        backend, tmp_path, settings=SpecSettings(route="dear"), prompt=CODE_PROMPT, raw=True, max_tokens=40
    )
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        if draft_lane:  # switched on in the controls panel
            await pilot.click("#draft-lane")
            await wait_for(pilot, lambda: app.playground.draft_lane, "the draft-only lane")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.status.startswith("finished"), "the run to end")
        await pilot.pause()
        assert "a round costs more than the tokens it wins" in str(
            app.query_one("#speculative", LaneView).query_one(StatsText).stats
        )
        assert app.query_one("#lanes").region.height >= 12  # at 80x24 the screen scrolls instead
        for name in app.playground.lanes:
            lane = app.query_one(f"#{name}", LaneView)
            stats, box, text = lane.query_one(StatsText), lane.query_one(StatsBox), lane.query_one(".lane-scroll")
            lines = [line.rstrip() for line in stats.stats.wrap(stats.content_size.width)]
            assert lane.content_region.contains_region(box.region), (name, lane.content_region, box.region)
            if size == (200, 50):
                assert box.max_scroll_y == 0, name
            if box.max_scroll_y > 0:  # the numbers before the text: it is down to its last row
                assert box.show_vertical_scrollbar and text.region.height == MIN_TEXT_ROWS, (name, text.region)
            assert (box in app.screen.focus_chain) == (box.max_scroll_y > 0)  # keys scroll it, where it scrolls
            seen: set[int] = set()
            for top in sorted({*range(0, box.max_scroll_y, box.scrollable_content_region.height), box.max_scroll_y}):
                box.scroll_to(y=top, animate=False, immediate=True)
                await pilot.pause()
                rows = drawn(app, box.scrollable_content_region)
                at = round(box.scroll_y)
                shown = lines[at : at + len(rows)]
                assert rows[: len(shown)] == shown, (name, at, rows, lines)
                seen.update(range(at, at + len(shown)))
            assert seen == set(range(len(lines))), (name, sorted(seen), lines)
