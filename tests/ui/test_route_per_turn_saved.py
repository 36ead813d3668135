"""The playground's session records where `auto` sent each turn and why, as `specplay run --save`
does: the first turn's in the header's request, each follow-up's in its turn record (auto chooses
anew for each turn's prompt), so the sessions listing and review pages can say it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.widgets import TextArea

from specplay.engine.settings import SpecSettings
from specplay.store import load_session
from specplay.ui.app import PlaygroundApp, PlaygroundOptions, create_app
from specplay.ui.protocols import RunState
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_config, scripted_stream, wait_for

ROUTE_MAP = {"code": "near", "prose": "far"}


def _app(sessions: Path, route: str) -> PlaygroundApp:
    backend = scripted_backend(drafters=("near", "far"))
    request = {"prompt": CODE_PROMPT, "max_tokens": 8, "ignore_eos": True, "raw": True}
    config = scripted_config(backend, sessions, settings=SpecSettings(route=route), **request)
    config = replace(config, route_map=ROUTE_MAP)
    return create_app(config, PlaygroundOptions(), backend.clock, scripted_stream(backend))


async def _turns(app: PlaygroundApp, *prompts: str) -> Path:
    """Run each prompt in turn, the later ones as follow-ups; the conversation's session."""
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        for turn, prompt in enumerate(prompts, 1):
            app.query_one("#prompt", TextArea).text = prompt
            await pilot.press("ctrl+r")
            words = f"finished (length){f' turn {turn}' if turn > 1 else ''} · "
            await wait_for(pilot, lambda w=words: app.playground.status.startswith(w), f"turn {turn}", timeout_s=60)
        assert app.playground.last_session is not None
        return app.playground.last_session


async def test_each_turn_of_a_playground_conversation_records_its_route_choice(tmp_path: Path) -> None:
    session = load_session(await _turns(_app(tmp_path, "auto"), CODE_PROMPT, PROSE_PROMPT, CODE_PROMPT))
    assert session.complete and [turn.prompt for turn in session.turns] == [CODE_PROMPT, PROSE_PROMPT, CODE_PROMPT]
    assert session.header["request"]["source"] == "tui"
    assert session.header["request"]["route_choice"] == session.turns[0].route_choice
    assert [turn.route_text("drafter") for turn in session.turns] == ["near", "far", "near"]
    assert [turn.main.start.drafter for turn in session.turns] == ["near", "far", "near"]  # type: ignore[union-attr]
    assert session.turns[1].route_text("why") == "auto: prose prompt → far (the route map)"


async def test_a_named_route_records_no_choice(tmp_path: Path) -> None:
    session = load_session(await _turns(_app(tmp_path, "near"), CODE_PROMPT, PROSE_PROMPT))
    assert [turn.route_choice for turn in session.turns] == [None, None]
    assert "route_choice" not in session.header["request"]
