"""The playground's screens, one feature per snapshot (pytest-textual-snapshot), each theme at least once.

Stable by construction: the scripted backend's distributions are seeded functions of the text,
its clock moves only as its models compute (tests/support/scripted.py), so every time and speed
on screen follows from the run's work, however often anything reads the clock; the seed is fixed,
the session file's name too, and each snapshot is taken once the run has ended.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Select, TextArea

from specplay.config.run_config import RunConfig
from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.stream import EventStream
from specplay.errors import ModelError
from specplay.store import writer
from specplay.ui.app import PlaygroundApp, create_app
from specplay.ui.protocols import RunState
from specplay.ui.widgets.tape import DraftTape
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import SCRIPTED, ScriptedBackend, scripted_backend
from tests.support.svg_colours import contrast, text_runs
from tests.support.ui_helpers import scripted_app, scripted_config, scripted_stream, wait_for

THEMES = ("specplay-dark", "specplay-light", "specplay-colorblind")
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_snapshots"
SIZE = (160, 50)
SAMPLED = SpecSettings(k=4, route="near", rule_params=RuleParams(tv_budget=0.1), sampling=SamplingParams(0.7))
Before = Callable[[Pilot[None]], Awaitable[None]]


@pytest.fixture(autouse=True)
def fixed_session_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "_new_name", lambda now: "session.jsonl")


def after_the_run(app: PlaygroundApp, then: Before | None = None) -> Before:
    async def run_before(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        app.query_one("#prompt", TextArea).cursor_blink = False
        if then is not None:
            await then(pilot)
        tape = app.query_one(DraftTape)  # a run's tape ends scrolled to its last round, once laid out
        await wait_for(pilot, lambda: tape.scroll_y == tape.max_scroll_y, "the tape scrolled to its end")
        await pilot.pause()

    return run_before


def autorun(backend: ScriptedBackend, tmp_path: Path, **kwargs: object) -> PlaygroundApp:
    options = {"prompt": CODE_PROMPT, "autorun": True, "max_tokens": 40, "raw": True, "seed": 1} | kwargs
    return scripted_app(backend, tmp_path, **({"settings": SAMPLED} | options))


@pytest.mark.parametrize("theme", THEMES)
def test_lanes_tape_and_drill_down(snap_compare, tmp_path: Path, theme: str) -> None:  # type: ignore[no-untyped-def]
    """Both lanes coloured by source, their stats, the draft tape and a drafted token's drill-down."""
    app = autorun(scripted_backend(drafters=("near", "far")), tmp_path, theme=theme)

    async def drill(pilot: Pilot[None]) -> None:
        app.query_one("#speculative").focus()
        await pilot.press("home", "right", "right")  # the drill-down on the third token

    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, drill))


@pytest.mark.parametrize("theme", THEMES)
def test_a_tree_round_and_a_nodes_siblings(snap_compare, tmp_path: Path, theme: str) -> None:  # type: ignore[no-untyped-def]
    """Draft trees of width 3: the tape's kept paths with the levels that lost below them, and the
    drill-down of a kept node listing its siblings."""
    settings = replace(SAMPLED, width=3, rule_params=RuleParams())
    app = autorun(scripted_backend(drafters=("near", "far")), tmp_path, theme=theme, settings=settings)

    async def drill(pilot: Pilot[None]) -> None:
        app.query_one("#speculative").focus()
        await pilot.press("home")  # the first token: a kept node of the first round's tree

    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, drill))


def test_counterfactual_routes_and_another_rules_knob(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Lenience on the knob, and every drafter judged each round beside the route."""
    settings = replace(SAMPLED, rule="lenience", rule_params=RuleParams(lenience=4.0), counterfactual=True)
    app = autorun(scripted_backend(drafters=("near", "far", "lookup")), tmp_path, settings=settings)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app))


def test_the_draft_only_lane(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    app = autorun(scripted_backend(drafters=("near", "far")), tmp_path, draft_lane=True, theme="specplay-light")
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app))


def test_controls_fixed_by_a_speculating_server(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What vLLM's native speculation shows: k, rule and budget are the server's, no target-only
    lane without a baseline server (the capabilities say so; the screen asks nothing else)."""
    backend = scripted_backend(drafters=("near",))
    backend.capabilities = replace(
        SCRIPTED, live_controls=False, fixed_by="the server speculates with its own settings", modes=("speculative",)
    )
    app = autorun(backend, tmp_path, theme="specplay-colorblind")
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app))


def test_a_conversations_second_turn(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A follow-up answered: each lane's text marks where turn 2 begins with the user's prompt, the
    stats are turn 2's with a line for both turns, the tape says where turn 2's rounds begin."""
    app = autorun(scripted_backend(drafters=("near", "far")), tmp_path, max_tokens=24, theme="specplay-light")

    async def follow_up(pilot: Pilot[None]) -> None:
        prompt = app.query_one("#prompt", TextArea)
        prompt.focus()
        prompt.select_all()
        await pilot.press(*"Now with a docstring.")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.status.startswith("finished (length) turn 2"), "turn 2")
        prompt.cursor_blink = False

    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, follow_up))


def test_a_model_that_fails_to_load(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The whole message, wrapped, and the lanes no longer loading."""

    def missing(config: RunConfig) -> EventStream:
        raise ModelError(
            "model '/home/someone/models/qwen2.5-coder-7b-instruct-q4_k_m-imatrix-final' has no config.json, "
            "and no GGUF file by that name either: pass an mlx-lm model folder, a .gguf file, or a name "
            "`specplay fetch` lists (the status line wraps so that this fix is read whole)"
        )

    app = create_app(scripted_config(scripted_backend(), tmp_path, prompt=CODE_PROMPT), open_stream=missing)

    async def failed(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: app.playground.state == RunState.FAILED, "the load to fail")
        app.query_one("#prompt", TextArea).cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=failed)


def test_loading(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The screen while the models load (the stream opens only once the snapshot is taken)."""
    backend, opened = scripted_backend(), threading.Event()
    scripted = scripted_stream(backend)

    def slow(config: RunConfig) -> EventStream:
        opened.wait(30)
        return scripted(config)

    app = create_app(scripted_config(backend, tmp_path, prompt=CODE_PROMPT), open_stream=slow)
    close = app.playground.close
    app.playground.close = lambda: (opened.set(), close())[-1]  # type: ignore[method-assign]

    async def loading(pilot: Pilot[None]) -> None:
        app.animation_level = "none"  # the loading indicator's dots move with the wall clock
        await wait_for(pilot, lambda: app.playground.status == "loading models…", "the load to start")
        app.main.query_one("#prompt", TextArea).cursor_blink = False
        await pilot.pause()

    try:
        assert snap_compare(app, terminal_size=SIZE, run_before=loading)
    finally:
        opened.set()


def test_the_route_list(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The route control open: auto, adaptive, every drafter (prompt lookup among them) and none."""
    app = autorun(scripted_backend(drafters=("near", "far", "lookup")), tmp_path, max_tokens=8)

    async def open_routes(pilot: Pilot[None]) -> None:
        routes = app.query_one("#route", Select)
        routes.focus()
        routes.action_show_overlay()

    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, open_routes))


@pytest.mark.parametrize("theme", THEMES)
def test_each_theme_meets_the_contrast_floor_on_screen(theme: str) -> None:
    """Read off the theme's snapshot as drawn: panel titles and token colours are text (WCAG AA,
    4.5:1 against what they are drawn on), panel borders are lines (3:1)."""
    svg = (SNAPSHOTS / f"test_lanes_tape_and_drill_down[{theme}].svg").read_text(encoding="utf-8")
    runs = text_runs(svg)
    names = ("target-only", "speculative", "draft tape", "token", "controls")
    titles = [r for r in runs if r.text.strip().startswith(names)]  # a title may say more after its name
    sources = ("accepted", "relaxed", "corrected", "bonus")
    tokens = [r for r in runs if any(f"■ {source}" in r.text for source in sources)]
    borders = [r for r in runs if r.text.strip()[:1] in ("╭", "╰") and set(r.text.strip()) <= set("╭╮╰╯─ ")]
    assert len(titles) >= 5 and len(tokens) == 4 and borders
    floors = [(r, 4.5) for r in titles + tokens] + [(r, 3.0) for r in borders]
    low = [(r.text.strip()[:12], round(contrast(r.colour, r.background), 2)) for r, floor in floors]
    assert [item for item, (_, floor) in zip(low, floors, strict=True) if item[1] < floor] == []
