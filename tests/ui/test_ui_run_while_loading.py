"""ctrl+r while the models load keeps the run for when they are loaded (ctrl+r again or escape takes
it back), on a scripted backend whose stream opens only when the test lets it."""

from __future__ import annotations

import threading
from pathlib import Path

from textual.pilot import Pilot

from specplay.config.run_config import RunConfig
from specplay.engine.events import DoneEvent
from specplay.engine.stream import EventStream
from specplay.store import list_session_files, load_session
from specplay.ui.app import PlaygroundApp, create_app
from specplay.ui.protocols import RunState
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_config, scripted_stream, wait_for

QUEUED = "the run starts once they are loaded"


def held_app(tmp_path: Path) -> tuple[PlaygroundApp, threading.Event]:
    """The playground whose models load only once the returned event is set."""
    backend, opened = scripted_backend(), threading.Event()
    scripted = scripted_stream(backend)

    def slow(config: RunConfig) -> EventStream:
        opened.wait(30)
        return scripted(config)

    config = scripted_config(backend, tmp_path, prompt=CODE_PROMPT, max_tokens=20, raw=True)
    app = create_app(config, open_stream=slow)
    close = app.playground.close
    app.playground.close = lambda: (opened.set(), close())[-1]  # type: ignore[method-assign]
    return app, opened


async def loading(app: PlaygroundApp, pilot: Pilot[None]) -> None:
    await wait_for(pilot, lambda: app.playground.status.startswith("loading models…"), "the load to start")


async def test_ctrl_r_while_loading_runs_once_the_models_are_loaded(tmp_path: Path) -> None:
    app, opened = held_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loading(app, pilot)
        await pilot.press("ctrl+r")
        assert app.playground.state == RunState.LOADING and QUEUED in app.playground.status
        assert "escape cancels" in app.playground.status
        opened.set()
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the kept run to end and be saved")
        final = app.playground.events["speculative"][-1]
        assert isinstance(final, DoneEvent) and len(final.token_ids) == 20
        assert app.playground.last_session is not None
        assert load_session(app.playground.last_session).prompt == CODE_PROMPT


async def test_ctrl_r_again_or_escape_takes_the_kept_run_back(tmp_path: Path) -> None:
    app, opened = held_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loading(app, pilot)
        await pilot.press("ctrl+r", "ctrl+r")
        assert not app.playground.pending.kept and "run cancelled" in app.playground.status
        await pilot.press("ctrl+r", "escape")
        assert not app.playground.pending.kept and "run cancelled" in app.playground.status
        opened.set()
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the models to load")
        await pilot.pause(0.1)
        assert app.playground.status.startswith("ready:") and app.playground.status.endswith("ctrl+r runs")
        assert app.playground.events["speculative"] == [] and list_session_files(tmp_path) == []


async def test_ctrl_r_before_the_first_frame_is_kept(tmp_path: Path) -> None:
    app, opened = held_app(tmp_path)
    app.action_run()  # as a key handled before the screen is up: nothing to draw on yet
    async with app.run_test(size=(200, 50)) as pilot:
        await loading(app, pilot)
        assert QUEUED in app.playground.status
        opened.set()
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the kept run to end and be saved")
