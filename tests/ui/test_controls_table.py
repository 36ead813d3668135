"""The controls table: the panel, its tooltips, the command palette and the flags' help all read
one row per control (config/controls.py), so each control says the same thing everywhere."""

from __future__ import annotations

import pytest

from specplay.cli import build_parser
from specplay.config.controls import CONTROLS, Control
from specplay.engine.live_controls import checked_change
from specplay.engine.settings import SpecSettings
from specplay.ui.protocols import RunState
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_app, wait_for


async def test_every_control_is_in_the_panel_and_the_palette_by_its_words(tmp_path: object) -> None:
    app = scripted_app(scripted_backend(drafters=("near", "far")), tmp_path, prompt=CODE_PROMPT, raw=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        commands = list(app.get_system_commands(app.screen))
        for control in CONTROLS.values():
            assert app.query_one(f"#{control.id}").tooltip == control.words, control.id
            mine = [c for c in commands if c.title.startswith((f"Set {control.label}", control.label))]
            assert mine and all(c.help == control.words for c in mine), control.id
        # The palette searches titles: the words the panel and the docs use find each control.
        titles = [c.title for c in commands]
        assert any("draft length" in t for t in titles) and any("draft-length policy" in t for t in titles)
        knob = [t for t in titles if t.startswith("Set the rule's knob: TV budget D ")]
        assert len(knob) > 10  # the knob of the rule in force (mentored), step by step
        # An entry moves its control as the user would, and the change reaches the settings.
        (half,) = [c for c in commands if c.title == "Set the rule's knob: TV budget D 0.5"]
        half.callback()
        await wait_for(
            pilot, lambda: app.playground.settings.rule_params.tv_budget == 0.5, "the TV budget from the palette"
        )


@pytest.mark.parametrize("control", [c for c in CONTROLS.values() if c.flag is not None], ids=lambda c: c.id)
def test_a_controls_flag_says_what_the_control_says(control: Control) -> None:
    assert control.flag is not None
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    (action,) = [a for a in run._actions if control.flag.name in a.option_strings]
    assert action.dest == control.setting
    assert action.help is not None and control.words in " ".join(action.help.split())


def test_a_change_reaches_the_lanes_its_setting_says() -> None:
    """Sampling goes to every lane, so target-only and speculative sample the same distribution;
    the rest to the speculative lane (the playground's controller reads this off the change)."""
    settings = SpecSettings()
    assert checked_change(settings, (), temperature=0.7).sampling_only
    others = {"k": 2, "rule": "typical", "tv_budget": 0.3, "policy": "cost", "counterfactual": True}
    assert not any(checked_change(settings, (), **{name: value}).sampling_only for name, value in others.items())
    assert not checked_change(settings, ("near",), route="near").sampling_only
