"""A control is its row in config/controls.py (and, for a new setting, its field in engine/settings.py).

A control defined here, in a test module only, for a setting no control sets (the policies' bound
k_max), and put in the table runs end to end: set by its flag on a `specplay run` command line,
shown and moved in the playground's panel and palette, and changed while a run goes, where it
re-applies because its setting declares how. So adding a control takes three files at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from textual.widgets import Select

from specplay.cli import build_parser
from specplay.cli.run import configure
from specplay.config.controls import CONTROLS, Control, Flag
from specplay.engine.events import ControlEvent, Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.settings import (
    LIVE_SETTINGS,
    POLICY_FIELDS,
    STREAM_FIELDS,
    Live,
    SpecSettings,
    flattened,
    live,
    live_declarations,
)
from specplay.ui.protocols import RunState
from specplay.ui.widgets.controls_panel import ControlsPanel
from tests.support.engine_runs import run
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import Cost, scripted_backend
from tests.support.ui_helpers import scripted_app, spec_rounds, wait_for

K_MAX = Control(
    id="k-max",
    label="k max (the policies' bound)",
    words="the largest k an adaptive draft-length policy may reach",
    flag=Flag(name="--k-max", group="policy", type=int),
    values=tuple(range(1, 17)),
)


@pytest.fixture
def k_max(monkeypatch: pytest.MonkeyPatch) -> Iterator[Control]:
    monkeypatch.setitem(CONTROLS, K_MAX.id, K_MAX)
    yield K_MAX


def test_its_flag_sets_it_in_a_run_config(k_max: Control) -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "--k-max", "3", "--policy", "acceptance-rate", "--prompt", "def f(x):"])
    config = configure(args)
    assert config.settings.policy_params.k_max == 3 and config.settings.policy == "acceptance-rate"
    # Its flag took the place of the setting's plain one: one --k-max, saying the control's words.
    run_parser = parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    (action,) = [a for a in run_parser._actions if "--k-max" in a.option_strings]
    assert action.dest == "k_max" and action.help == f"{k_max.words} (default 8)"


async def test_the_panel_shows_it_and_a_change_reaches_the_lane_while_it_runs(k_max: Control, tmp_path: Path) -> None:
    backend = scripted_backend(Cost(wall_ms=2.0), drafters=("near", "far"))  # runs long enough to change
    settings = SpecSettings(route="near", policy="acceptance-rate")
    options = {"prompt": CODE_PROMPT, "max_tokens": 5000, "ignore_eos": True, "raw": True}
    app = scripted_app(backend, tmp_path, settings=settings, **options)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        widget = app.query_one("#k-max", Select)
        assert widget.value == 8 and widget.tooltip == k_max.words
        widget.value = 6
        await wait_for(pilot, lambda: app.playground.settings.policy_params.k_max == 6, "k_max from the panel")
        # The palette offers each of its values, by its label.
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert {f"Set {k_max.label}: {k}" for k in range(1, 17)} <= commands.keys()
        commands[f"Set {k_max.label}: 5"].callback()
        await wait_for(pilot, lambda: app.playground.settings.policy_params.k_max == 5, "k_max from the palette")
        # While a run goes, a move reaches the speculative lane, whose policy takes the new bound.
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(spec_rounds(app)) >= 3, "rounds")
        assert app.playground.lane_run.controls["speculative"].settings.policy_params.k_max == 5
        widget.value = 2
        events = app.playground.events["speculative"]
        await wait_for(pilot, lambda: _changed_at(events, "k_max") is not None, "the change in the lane")
        at = _changed_at(events, "k_max")
        assert at is not None
        await wait_for(pilot, lambda: len(_rounds_after(events, at)) >= 3, "rounds after the change")
        assert all(len(r.drafted) <= 2 for r in _rounds_after(events, at))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the lanes to stop")
        panel = app.query_one(ControlsPanel)
        panel.show(app.playground.settings.changed(k_max=11), seed=0)  # a reopened session's value
        assert widget.value == 11


def test_a_live_change_rebuilds_the_policy_because_its_setting_says_so(k_max: Control) -> None:
    assert LIVE_SETTINGS[k_max.setting] is Live.POLICY and k_max.setting in POLICY_FIELDS
    backend = scripted_backend(drafters=("self",))  # the target itself: every draft accepted, k climbs

    def lower(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent) and event.index == 6:
            controls.update(**{k_max.setting: 2})

    events = run(backend, CODE_PROMPT, max_tokens=120, on_event=lower, k=4, policy="acceptance-rate")
    drafted = [len(e.drafted) for e in events if isinstance(e, RoundEvent)]
    assert drafted[:7] == [4, 5, 6, 7, 8, 8, 8]  # up to the old bound, k_max 8
    at = _changed_at(events, "k_max")
    assert at is not None
    after = [len(e.drafted) for e in _rounds_after(events, at)]
    assert after and all(k <= 2 for k in after)  # the rebuilt policy keeps the new bound at once


def test_every_setting_declares_how_a_live_change_reapplies() -> None:
    """A new setting without a declaration stops engine/settings.py from importing, naming it."""
    assert LIVE_SETTINGS.keys() == flattened(SpecSettings()).keys()
    # What the engine reads (engine/loop.py), as it was written by hand before the declarations.
    policy = ["k", "policy", "k_min", "k_max", "low_acceptance", "high_acceptance", "ema_alpha"]
    policy += ["confidence_threshold", "width", "tree_nodes"]
    assert sorted(POLICY_FIELDS) == sorted(policy)
    assert sorted(STREAM_FIELDS) == sorted(["route", "temperature", "top_p", "top_k", "min_p"])


@dataclass(frozen=True, slots=True, kw_only=True)
class _Forgotten(SpecSettings):
    draft_budget: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Declared(SpecSettings):
    draft_budget: int = field(default=0, metadata=live(Live.POLICY))


@dataclass(frozen=True, slots=True)
class _Bounds:
    k_cap: int = 3


def test_a_setting_without_a_declaration_is_named() -> None:
    with pytest.raises(TypeError, match=r"_Forgotten\.draft_budget declares no live re-application"):
        live_declarations(_Forgotten())
    assert live_declarations(_Declared())["draft_budget"] is Live.POLICY
    # A group's fields declare their own, where the group declares none for them (policy_params).
    with pytest.raises(TypeError, match=r"_Bounds\.k_cap declares no live re-application"):
        live_declarations(SpecSettings(policy_params=_Bounds()))  # type: ignore[arg-type]


def _changed_at(events: list[Event], setting: str) -> int | None:
    """Where, in `events`, a control event moved `setting`."""
    for i, event in enumerate(events):
        if isinstance(event, ControlEvent) and any(name == setting for name, _, _ in event.changes):
            return i
    return None


def _rounds_after(events: list[Event], index: int) -> list[RoundEvent]:
    return [e for e in events[index + 1 :] if isinstance(e, RoundEvent)]
