"""The playground driven by Textual's Pilot on real tiny models."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Select, TextArea
from textual_slider import Slider

from specplay.engine.events import ControlEvent, DoneEvent
from specplay.store import list_session_files, load_session
from specplay.ui.app import PlaygroundApp
from specplay.ui.lane_view import LaneView
from tests.conftest import CODE_PROMPT, TinyModels
from tests.ui_helpers import after, make_app, spec_rounds, wait_for


def _control_index(app: PlaygroundApp, setting: str, value: object) -> int | None:
    """Where, in the speculative lane's events, `setting` became `value`."""
    for i, event in enumerate(app.events["speculative"]):
        if isinstance(event, ControlEvent) and any(c[0] == setting and c[2] == value for c in event.changes):
            return i
    return None


async def test_type_run_change_controls_stop_and_save(tiny: TinyModels, tmp_path: Path) -> None:
    app = make_app(tiny, tmp_path, max_tokens=5000, ignore_eos=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.state == "ready", "models to load")
        await pilot.click("#prompt")
        await pilot.press(*"def f(x):")
        assert app.query_one("#prompt", TextArea).text == "def f(x):"
        app.query_one("#route", Select).value = "near"
        await wait_for(pilot, lambda: app.settings.route == "near", "the route to be pinned before the run")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(spec_rounds(app)) >= 3, "rounds at k=4")

        app.query_one("#k", Slider).value = 2
        await wait_for(pilot, lambda: _control_index(app, "k", 2) is not None, "the k change to take effect")
        app.query_one("#route", Select).value = "far"
        await wait_for(pilot, lambda: _control_index(app, "route", "far") is not None, "the route change")
        app.query_one("#tv", Slider).value = 10
        await wait_for(pilot, lambda: _control_index(app, "tv_budget", 0.5) is not None, "the TV budget change")
        tv_at = _control_index(app, "tv_budget", 0.5)
        assert tv_at is not None
        await wait_for(pilot, lambda: len(after(app.events["speculative"], tv_at)) >= 3, "rounds after the changes")

        handled: list[float] = []
        stop = app.action_stop
        app.action_stop = lambda: (handled.append(time.perf_counter()), stop())[-1]  # type: ignore[method-assign]
        pressed = time.perf_counter()
        await pilot.press("escape")
        # The key is handled at once, however busy the lanes are: events reach the UI in batches.
        assert handled and handled[0] - pressed < 0.1, handled[0] - pressed
        await wait_for(pilot, lambda: app.state == "ready", "the lanes to stop")

        events = app.events["speculative"]
        k_at, route_at = _control_index(app, "k", 2), _control_index(app, "route", "far")
        assert k_at is not None and route_at is not None
        assert all(r.k == 4 and r.route == "near" for r in spec_rounds(app)[:3])
        assert after(events, k_at) and all(r.k == 2 for r in after(events, k_at))
        assert all(r.route == "far" for r in after(events, route_at))
        assert all(p.theta > 0 for r in after(events, tv_at) for p in r.positions if p.tv_distance > 0)
        k_change = events[k_at]
        assert isinstance(k_change, ControlEvent) and ("k", 4, 2) in k_change.changes
        assert "⟨k=2⟩" in app.query_one("#speculative", LaneView).text  # the marker in the stream
        for lane in ("speculative", "target"):
            final = app.events[lane][-1]
            assert isinstance(final, DoneEvent) and final.finish_reason == "cancelled"
        # Only sampling changes reach the target-only lane.
        assert not any(isinstance(e, ControlEvent) for e in app.events["target"])

        assert app.last_session is not None
        session = load_session(app.last_session)
        assert session.complete and list(session.header["lanes"]) == ["speculative", "target"]
        assert [p.name for p in list_session_files(tmp_path)] == [app.last_session.name]

        before = app.theme_variables["spec-accepted"]
        await pilot.press("ctrl+t")
        assert app.theme != "specplay-dark" and app.theme_variables["spec-accepted"] != before


async def test_autorun_to_the_end_shows_stats_and_saves(tiny: TinyModels, tmp_path: Path) -> None:
    app = make_app(tiny, tmp_path, prompt=CODE_PROMPT, autorun=True, max_tokens=30, ignore_eos=True, raw=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.last_session is not None, "the run to end and be saved")
        for lane in ("speculative", "target"):
            final = app.events[lane][-1]
            assert isinstance(final, DoneEvent) and final.finish_reason == "length" and len(final.token_ids) == 30
        spec, target = app.tallies["speculative"], app.tallies["target"]
        assert spec.tokens == target.tokens == 30 and spec.rounds > 0
        assert spec.alpha is not None and spec.tokens_per_s and target.tokens_per_s
        stats = str(app.query_one("#speculative", LaneView).query_one(".lane-stats").render())
        assert "predicted" in stats and "mean acceptance length" in stats and "–× predicted" not in stats
        assert app.last_session is not None
        session = load_session(app.last_session)
        assert session.complete and session.header["request"]["max_tokens"] == 30


async def test_a_load_error_is_one_line_and_the_app_still_quits(tmp_path: Path) -> None:
    from specplay.backends.mlx import load_mlx_backend
    from specplay.ui.app import PlaygroundOptions, create_app

    missing = str(tmp_path / "no-such-model")
    app = create_app(lambda: load_mlx_backend(missing, []), PlaygroundOptions(sessions_dir=tmp_path))
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.state == "failed", "the load to fail")
        assert "no-such-model" in app.status and "\n" not in app.status
        await pilot.press("ctrl+r")  # refused, the app stays up
        assert app.state == "failed"
        await pilot.press("ctrl+q")
    assert app.return_code == 0
