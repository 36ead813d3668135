"""The playground against what it cannot save or read: an unwritable sessions folder, a seed of
thousands of digits, a session nested too deep for a recursive parser; and a crash, which ends
`specplay tui` with one line and a non-zero status."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Input

from specplay.cli import main
from specplay.config.numbers import SEED_MAX
from specplay.ui.app import PlaygroundApp
from specplay.ui.controller import PlaygroundController
from specplay.ui.opened import open_saved
from specplay.ui.protocols import RunState
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.session_events import write_deep_session
from tests.support.ui_helpers import scripted_app, wait_for


async def test_a_run_that_cannot_be_saved_says_so_while_it_runs_and_after(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder under a file cannot be made, even by root
    app = scripted_app(scripted_backend(), blocker / "sessions", prompt=CODE_PROMPT, max_tokens=30, raw=True)
    said: list[tuple[str, bool]] = []
    async with app.run_test(size=(140, 45)) as pilot:
        original = app.playground.set_status
        app.playground.set_status = lambda text, error=False: (said.append((text, error)), original(text, error))[-1]  # type: ignore[method-assign]
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: said and said[-1][0].startswith("finished ("), "the run to finish")
    during = [text for text, error in said if text.startswith("not saving: ") and error]
    assert during and str(blocker) in during[0], said
    final, error = said[-1]
    assert "NOT saved: " in final and str(blocker) in final and error, final
    assert app.playground.last_session is None


async def test_the_seed_field_takes_no_number_beyond_a_seed(tmp_path: Path) -> None:
    app = scripted_app(scripted_backend(), tmp_path, prompt=CODE_PROMPT, max_tokens=8, raw=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        field = app.query_one("#seed", Input)
        for text, seed in (("7", 7), (str(SEED_MAX), SEED_MAX), ("9" * 5000, SEED_MAX), (str(SEED_MAX + 1), SEED_MAX)):
            field.value = text
            await pilot.pause()
            assert app.playground.seed == seed, text[:30]
        field.value = "12"
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "a run on the last good seed")
    assert app.playground.seed == 12 and app.crash is None


async def test_a_deep_session_in_the_palette_is_unreadable_not_fatal(tmp_path: Path) -> None:
    write_deep_session(tmp_path)
    app = scripted_app(scripted_backend(), tmp_path, prompt=CODE_PROMPT, max_tokens=8, raw=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        titles = [str(c.title) for c in app.get_system_commands(app.screen)]
        (entry,) = [t for t in titles if t.startswith("Open session")]
        assert "deep" in entry
        (path,) = tmp_path.glob("*.jsonl")
        open_saved(app.playground, path)
        await pilot.pause()
        assert "nests JSON deeper than" in app.playground.status and "\n" not in app.playground.status
        assert app.playground.state == RunState.READY
    assert app.crash is None


def test_a_crashed_playground_exits_non_zero_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def crash(self: PlaygroundController, *args: object, **kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("specplay.cli.tui.terminal_problem", lambda: None)  # as if in a terminal
    monkeypatch.setattr(PlaygroundApp, "run", lambda self: App.run(self, headless=True))
    monkeypatch.setattr(PlaygroundController, "load", crash)
    assert main(["tui", "--sessions-dir", str(tmp_path), "--prompt", "x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the playground crashed: RecursionError" in err and "Traceback" not in err, err
