"""A drill-down longer than its box (a tree round's siblings over the top-5 table) scrolls in the
box: every line can be read, by keys or the wheel, and a new pick starts again at its top."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widget import Widget

from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.ui.app import PlaygroundApp
from specplay.ui.widgets.inspector import Inspector
from specplay.ui.widgets.lane_view import LaneView, Pick
from specplay.ui.widgets.tape import DraftTape
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import drawn, scripted_app, wait_for

TREES = SpecSettings(k=4, route="near", width=2, rule_params=RuleParams(), sampling=SamplingParams(0.7))
"""Draft trees of width 2: a kept node's drill-down lists its siblings above the top-5 table."""


def _lines(app: PlaygroundApp) -> list[str]:
    """The drill-down's lines, as wrapped at its width."""
    return [line.rstrip() for line in str(app.query_one(Inspector).render()).split("\n")]


def _rows(app: PlaygroundApp, box: Widget) -> list[str]:
    """The rows drawn inside the drill-down's box, its scrollbar's column left out."""
    return drawn(app, box.scrollable_content_region)


async def _pick(app: PlaygroundApp, pilot: Pilot[None], long: bool) -> Pick:
    """Picks the first token whose drill-down is longer than its box (`long`), or fits it."""
    lane, box = app.query_one("#speculative", LaneView), app.query_one("#inspector")
    for pick in lane.picks:
        lane.select(pick.index)
        await pilot.pause()
        if (len(_lines(app)) > box.content_region.height) == long:
            return pick
    raise AssertionError(f"no token whose drill-down {'overflows' if long else 'fits'} at {app.size}")


@pytest.mark.parametrize("size", [(160, 50), (80, 30)])
async def test_every_line_of_a_long_drill_down_can_be_read(tmp_path: Path, size: tuple[int, int]) -> None:
    backend = scripted_backend(drafters=("near", "far"))
    options = {"prompt": CODE_PROMPT, "autorun": True, "max_tokens": 32, "raw": True, "seed": 1}
    app = scripted_app(backend, tmp_path, settings=TREES, **options)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        box = app.query_one("#inspector")
        assert box not in app.screen.focus_chain  # the hint fits: nothing to scroll, no tab stop
        pick = await _pick(app, pilot, long=True)
        assert pick.round is not None and "siblings, in turn" in str(app.query_one(Inspector).render())
        box.scroll_visible(animate=False, immediate=True)  # at 80x30 the screen scrolls to the drill-down
        await pilot.pause()
        lines = _lines(app)
        rows = _rows(app, box)
        assert rows == lines[: len(rows)], "\n".join(rows)  # its top, wrapped at the width beside the scrollbar
        assert not any(lines[-1] in row for row in rows)  # below the box, and the scrollbar says so
        assert box.show_vertical_scrollbar

        app.query_one(DraftTape).focus()
        await pilot.press("tab")  # the drill-down is the next tab stop while it scrolls
        assert app.focused is box
        await pilot.press("end")
        await pilot.pause()
        rows = _rows(app, box)
        assert rows[-1] == lines[-1], "\n".join(rows)  # the last line, "top 5"'s last row, drawn
        assert rows == lines[-len(rows) :]
        await pilot.press("home", "down")
        assert box.scroll_y == 1 and _rows(app, box) == lines[1 : 1 + len(rows)]

        await pilot.press("home")
        x, y = box.content_region.center
        for _ in range(len(lines)):  # the wheel, over the drill-down, scrolls it to its end
            app.post_message(events.MouseScrollDown(None, x, y, 0, 1, 0, False, False, False, x, y))
            await pilot.pause()
        assert _rows(app, box)[-1] == lines[-1]

        # Another token's drill-down starts at its top.
        lane = app.query_one("#speculative", LaneView)
        lane.select(next(p.index for p in lane.picks if p.index != pick.index))
        await pilot.pause()
        assert box.scroll_y == 0 and _rows(app, box)[0] == _lines(app)[0]
