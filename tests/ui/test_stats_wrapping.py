"""The lanes' stats break only between phrases ("k 2.6," never parted from its number), at the
width the lane has, and again when the terminal's width changes."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from specplay.engine.settings import SpecSettings
from specplay.ui.app import PlaygroundApp
from specplay.ui.phrased import lines_of, phrases, prose
from specplay.ui.protocols import RunState
from specplay.ui.widgets.lane_view import LaneView
from specplay.ui.widgets.stats_view import StatsText
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_app, wait_for

SPEED = (*phrases("speedup 1.79× measured", "2.19× predicted"), " (per-token acceptance α 0.88,", " k 4.0,", " c 0.20)")


def test_a_line_breaks_only_between_phrases() -> None:
    stats = lines_of(SPEED)
    assert str(stats) == "speedup 1.79× measured  2.19× predicted (per-token acceptance α 0.88, k 4.0, c 0.20)"
    assert stats.wrap(30) == [
        "speedup 1.79× measured",
        "2.19× predicted",
        "(per-token acceptance α 0.88,",
        "k 4.0, c 0.20)",
    ]
    assert stats.wrap(45) == ["speedup 1.79× measured  2.19× predicted", "(per-token acceptance α 0.88, k 4.0, c 0.20)"]
    assert stats.wrap(200) == [str(stats)]


def test_a_phrase_wider_than_the_width_breaks_between_its_words() -> None:
    assert lines_of(phrases("draft acceptance rate 0.75", "TV 0.08")).wrap(12) == [
        "draft",
        "acceptance",
        "rate 0.75",
        "TV 0.08",
    ]


def test_prose_keeps_a_number_with_the_word_before_it() -> None:
    words = prose("host costs 0.60 target steps: k 8 → 1.05× (0.45 kept)")
    assert words == ("host", " costs 0.60", " target", " steps:", " k 8 → 1.05×", " (0.45", " kept)")
    assert "".join(words) == "host costs 0.60 target steps: k 8 → 1.05× (0.45 kept)"


def _check_phrases_whole(app: PlaygroundApp) -> list[str]:
    """The speculative lane's stats as shown: each line within the widget's width, every phrase
    whole on one line, and nothing lost or added."""
    widget = app.query_one("#speculative", LaneView).query_one(StatsText)
    shown = str(widget.render()).rstrip("\n").split("\n")
    width = widget.content_size.width
    assert all(len(line) <= width for line in shown), (width, shown)
    for line in widget.stats.lines:
        # a phrase wider than the lane: whole between its words, as prose
        for phrase in (piece for p in line for piece in (prose(p.strip()) if len(p.strip()) > width else (p,))):
            assert any(phrase.strip() in row for row in shown), (phrase, width, "\n".join(shown))
    assert " ".join(" ".join(shown).split()) == " ".join(str(widget.stats).split())
    return shown


async def _finish_run(app: PlaygroundApp, pilot: Pilot[None]) -> None:
    await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
    await pilot.press("ctrl+r")
    await wait_for(pilot, lambda: app.playground.status.startswith("finished"), "the run to end")
    await pilot.pause()


async def test_stats_wrap_between_phrases_narrow_and_wide_and_rewrap_on_resize(tmp_path: Path) -> None:
    backend = scripted_backend(drafters=("near",))
    app = scripted_app(
        backend, tmp_path, settings=SpecSettings(route="near"), prompt=CODE_PROMPT, raw=True, max_tokens=24
    )
    async with app.run_test(size=(110, 45)) as pilot:
        await _finish_run(app, pilot)
        narrow = _check_phrases_whole(app)
        assert any(row.startswith("(per-token acceptance α") for row in narrow), narrow  # broken before, not inside
        await pilot.resize_terminal(220, 45)
        await pilot.pause()
        wide = _check_phrases_whole(app)
        assert len(wide) < len(narrow), (narrow, wide)
        assert any("predicted (per-token acceptance α" in row for row in wide), wide
        await pilot.resize_terminal(110, 45)
        await pilot.pause()
        assert _check_phrases_whole(app) == narrow
