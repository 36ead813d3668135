"""The playground marks a measured speedup read while the machine's speed moved, `busy`, with why
in the stats' tooltip, by the one definition `specplay run` and `specplay sessions` use
(engine/disturbance.py): live, once the run ends, reopened from its session, and over a
conversation's turns. The scripted clock is the machine: quiet, or three times slower for a while."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from specplay.engine.disturbance import speedup_disturbance
from specplay.engine.events import Event
from specplay.engine.loop import SpecEngine
from specplay.engine.routers.routing import routing_for
from specplay.engine.settings import SpecSettings
from specplay.runner.host import OpenStream
from specplay.store import load_session
from specplay.ui.app import PlaygroundApp, PlaygroundOptions, create_app
from specplay.ui.protocols import RunState
from specplay.ui.stats import LaneTally, compare, disturbance
from specplay.ui.widgets.lane_view import LaneView
from specplay.ui.widgets.stats_view import STATS_KEY, speculative_stats, stats_key
from tests.support.costs_clock import LoadedClock
from tests.support.disturbed import BUSY_TARGET, LANE_S, QUIET, measured_lanes
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_config, wait_for

WHY = "the target-only lane's step moved by "


def _tally(events: list[Event]) -> LaneTally:
    """A lane's tally as the screen takes its events."""
    tally = LaneTally()
    for i, event in enumerate(events):
        tally.add(event, busy_s=0.01 * i)
    return tally


def test_the_speedup_phrase_says_busy_and_the_tooltip_why() -> None:
    main, baseline = measured_lanes(*BUSY_TARGET)
    comparison = compare(_tally(main.events), _tally(baseline.events))
    assert comparison.disturbed == speedup_disturbance(main.metrics, baseline.metrics)  # the one definition
    assert comparison.disturbed is not None and comparison.disturbed.startswith(WHY)
    stats = str(speculative_stats(_tally(main.events), comparison))
    assert f"{comparison.speedup:.2f}× measured busy" in stats
    assert stats_key(comparison.disturbed) == f"{STATS_KEY}\n\nbusy: {comparison.disturbed}"
    # live, before either lane's end: the drift of the timings so far
    live = compare(_tally(main.events[:-1]), _tally(baseline.events[:-1]))
    assert live.disturbed is not None and live.disturbed.startswith(WHY)
    quiet = compare(*(_tally(lane.events) for lane in measured_lanes(*QUIET)))
    assert quiet.speedup is not None and quiet.disturbed is None
    assert "busy" not in str(speculative_stats(_tally(main.events), quiet)) and stats_key(None) == STATS_KEY


def test_a_conversation_names_each_turn_whose_speedup_was_disturbed() -> None:
    quiet, busy = measured_lanes(*QUIET), measured_lanes(*BUSY_TARGET)
    turns = [quiet, busy, quiet]
    why = disturbance([_tally(s.events) for s, _ in turns], [_tally(t.events) for _, t in turns])
    assert why is not None and why.startswith(f"turn 2: {WHY}") and "turn 1" not in why and "turn 3" not in why
    assert disturbance([_tally(quiet[0].events)] * 2, [_tally(quiet[1].events)] * 2) is None


def _app(sessions: Path, slow: tuple[float, float], **options: object) -> PlaygroundApp:
    """The playground on the scripted engine, it and the lanes timed by one clock three times
    slower from `slow[0]` to `slow[1]` of simulated time; nothing drafted (a speedup near 1)."""
    backend = scripted_backend(drafters=("near",))
    clock = LoadedClock(backend.clock, slow_from_s=slow[0], slow_until_s=slow[1])
    open_stream: OpenStream = lambda config: SpecEngine(backend, routing_for(backend.drafters), clock=clock)  # noqa: E731
    request = {"prompt": CODE_PROMPT, "max_tokens": 60, "ignore_eos": True, "raw": True}
    config = scripted_config(backend, sessions, settings=SpecSettings(route="none", k=4), **request)
    return create_app(config, PlaygroundOptions(**options), clock, open_stream)  # type: ignore[arg-type]


def _stats(app: PlaygroundApp) -> tuple[str, str]:
    widget = app.query_one("#speculative", LaneView).query_one(".lane-stats", Static)
    return str(widget.render()), str(widget.tooltip)


def _words(stats: tuple[str, str]) -> tuple[str, str]:
    return " ".join(stats[0].split()), stats[1]


async def test_a_run_on_a_busy_machine_is_marked_and_reopened_the_same(tmp_path: Path) -> None:
    # the lanes take turns: slower for the second half of the run, both lanes' timings drift
    app = _app(tmp_path / "busy", (LANE_S, 100.0), autorun=True)
    async with app.run_test(size=(180, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        await pilot.pause()
        stats, tooltip = _stats(app)
        assert "measured busy" in _words((stats, tooltip))[0]
        assert tooltip.startswith(STATS_KEY) and "\n\nbusy: " in tooltip and "the machine is busy" in tooltip
        saved = app.playground.last_session
    assert saved is not None
    session = load_session(saved)
    assert speedup_disturbance(session.main.metrics, session.baseline.metrics) in tooltip  # type: ignore[union-attr]

    reopened = _app(tmp_path / "busy", QUIET, open_session=saved)
    async with reopened.run_test(size=(180, 50)) as pilot:
        await wait_for(pilot, lambda: reopened.playground.state == RunState.READY, "models to load")
        # the same words and the same why (where the lines break follows the width the lane has just then)
        await wait_for(pilot, lambda: _words(_stats(reopened)) == _words((stats, tooltip)), "the opened stats", 10)


async def test_a_run_on_a_quiet_machine_says_nothing_of_it(tmp_path: Path) -> None:
    app = _app(tmp_path / "quiet", QUIET, autorun=True)
    async with app.run_test(size=(180, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        await pilot.pause()
        stats, tooltip = _stats(app)
        assert "speedup" in stats and "busy" not in stats and tooltip == STATS_KEY
