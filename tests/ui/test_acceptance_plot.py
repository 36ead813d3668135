"""The speculative lane's acceptance plot says why it has no bars: a run on route `none` drafted
nothing, a run that ended before its first round judged nothing; neither reads as if nothing ran."""

from __future__ import annotations

from pathlib import Path

from specplay.engine.settings import SpecSettings
from specplay.ui.app import PlaygroundApp
from specplay.ui.protocols import RunState
from specplay.ui.widgets.plots import Plots
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import Cost, scripted_backend
from tests.support.ui_helpers import scripted_app, wait_for


def _app(tmp_path: Path, route: str, drafter: str = "near", **request: object) -> PlaygroundApp:
    options = {"prompt": CODE_PROMPT, "raw": True} | request
    return scripted_app(scripted_backend(drafters=(drafter,)), tmp_path, settings=SpecSettings(route=route), **options)


async def _plot_after_run(app: PlaygroundApp) -> str:
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.status.startswith("finished"), "the run to end")
        await pilot.pause()
        return str(app.query_one(Plots).render())


async def test_a_run_on_route_none_says_it_drafted_nothing(tmp_path: Path) -> None:
    app = _app(tmp_path, "none", max_tokens=8)
    plot = await _plot_after_run(app)
    rounds = app.playground.tallies["speculative"].rounds
    assert rounds > 0
    assert f"route none drafts nothing: {rounds} rounds of the target alone, no drafts to judge" in plot, plot
    assert "no rounds yet" not in plot


async def test_a_run_stopped_before_its_first_round_says_so(tmp_path: Path) -> None:
    backend = scripted_backend(Cost(wall_ms=300.0), drafters=("near",))
    app = scripted_app(backend, tmp_path, settings=SpecSettings(route="near"), prompt=CODE_PROMPT, raw=True)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.press("ctrl+r", "escape")  # stopped during the prefill: the next round never starts
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the lanes to stop")
        await pilot.pause()
        plot = str(app.query_one(Plots).render())
    tally = app.playground.tallies["speculative"]
    assert (tally.rounds, tally.finish_reason) == (0, "cancelled")
    assert "the run ended before its first round: no drafts to judge" in plot, plot
    assert "no rounds yet" not in plot


async def test_a_drafting_run_shows_bars_not_a_reason(tmp_path: Path) -> None:
    app = _app(tmp_path, "near", max_tokens=12)
    plot = await _plot_after_run(app)
    assert " 1 " in plot and "no drafts to judge" not in plot and "no rounds yet" not in plot, plot


async def test_prompt_lookup_with_nothing_to_copy_says_it_drafted_nothing(tmp_path: Path) -> None:
    app = _app(tmp_path, "lookup", "lookup", prompt="Hello", max_tokens=3)
    plot = await _plot_after_run(app)
    tally = app.playground.tallies["speculative"]
    assert (tally.rounds, tally.drafted) == (3, 0)  # a short prompt with no repeat: nothing to copy
    assert "lookup drafted nothing in 3 rounds: no drafts to judge" in plot, plot
