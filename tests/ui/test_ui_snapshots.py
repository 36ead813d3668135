"""The main screen after a seeded run, in each shipped theme (pytest-textual-snapshot).

Deterministic by construction: a fixed seed, a fake clock (every reading advances 1 ms, and the
model thread reads it the same number of times each run), and a fixed session file name.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import TextArea

from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.store import writer
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels
from tests.support.ui_helpers import make_app, wait_for

THEMES = ("specplay-dark", "specplay-light", "specplay-colorblind")


def fake_clock() -> Callable[[], float]:
    ticks = itertools.count()
    return lambda: next(ticks) / 1000


@pytest.mark.parametrize("theme", THEMES)
def test_main_screen_after_a_run(
    snap_compare, tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, theme: str
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(writer, "_new_name", lambda now: "session.jsonl")
    settings = SpecSettings(
        k=4,
        route="near",
        rule_params=RuleParams(tv_budget=0.1),
        sampling=SamplingParams(temperature=0.7),
        counterfactual=True,
    )
    app = make_app(
        tiny,
        tmp_path,
        clock=fake_clock(),
        prompt=CODE_PROMPT,
        autorun=True,
        max_tokens=40,
        ignore_eos=True,
        raw=True,
        seed=1,
        settings=settings,
        theme=theme,
    )

    async def run_before(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        app.query_one("#prompt", TextArea).cursor_blink = False
        lane = app.query_one("#speculative")
        lane.focus()
        await pilot.press("home", "right", "right")  # the drill-down on the third token
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 50), run_before=run_before)
