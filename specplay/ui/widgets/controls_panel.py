"""The live controls: k, TV budget, policy, route, temperature, seed.

The panel only reports changes (ControlsPanel.Changed); the app decides which lane's LiveControls
they go to. Seed is not live: it seeds the next run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Select, Switch
from textual_slider import Slider

from specplay.engine.settings import AUTO_ROUTE, POLICIES, SpecSettings

K_MAX = 16
TV_STEPS = 20
"""The TV budget slider is an integer slider: D = step / TV_STEPS, so 0..1 in 0.05 steps."""
TEMPERATURES = (0.0, 0.3, 0.7, 1.0)


def tv_from_step(step: int) -> float:
    return round(step / TV_STEPS, 4)


def step_from_tv(tv: float) -> int:
    return round(tv * TV_STEPS)


class ControlsPanel(VerticalScroll):
    DEFAULT_CSS = """
    ControlsPanel { width: 36; border: round $panel-lighten-2; padding: 0 1; }
    ControlsPanel Label { margin-top: 1; color: $text-muted; }
    ControlsPanel Slider { width: 100%; }
    ControlsPanel Select, ControlsPanel Input { width: 100%; }
    ControlsPanel Horizontal { height: auto; margin-top: 1; }
    ControlsPanel Horizontal Label { margin: 1 0 0 1; }
    """

    class Changed(Message):
        """A control moved: `setting` is a SpecSettings field name, 'seed' or 'draft_lane'."""

        def __init__(self, setting: str, value: Any) -> None:
            super().__init__()
            self.setting = setting
            self.value = value

    def __init__(self, settings: SpecSettings, seed: int, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "controls"
        self._settings = settings
        self._seed = seed
        self._routes = [settings.route]
        self._temperatures = sorted({*TEMPERATURES, settings.sampling.temperature})

    def compose(self) -> ComposeResult:
        s = self._settings
        yield Label(self._k_label(s.k), id="k-label")
        yield Slider(1, K_MAX, value=min(s.k, K_MAX), id="k")
        yield Label(self._tv_label(s.tv_budget), id="tv-label")
        yield Slider(0, TV_STEPS, value=step_from_tv(s.tv_budget), id="tv")
        yield Label("policy")
        yield Select([(p, p) for p in POLICIES], value=s.policy, allow_blank=False, id="policy")
        yield Label("route")
        yield Select([(s.route, s.route)], value=s.route, allow_blank=False, id="route")
        yield Label("temperature")
        yield Select(
            [(f"{t:g}", t) for t in self._temperatures],
            value=s.sampling.temperature,
            allow_blank=False,
            id="temperature",
        )
        yield Label("seed (next run)")
        yield Input(str(self._seed), type="integer", id="seed")
        with Horizontal():
            yield Switch(False, id="draft-lane")
            yield Label("draft-only lane")

    def set_drafters(self, drafters: Sequence[str]) -> None:
        route = self.query_one("#route", Select)
        current = route.value
        names = [AUTO_ROUTE, *drafters]
        self._routes = names
        route.set_options([(name, name) for name in names])
        route.value = current if current in names else AUTO_ROUTE

    def fix_speculation(self, why: str, routes: bool) -> None:
        """Native mode: each server fixes k, the TV budget, the policy and its drafter; their
        controls stay visible, read-only, with the reason. `routes`: several servers to route to."""
        for id in ("k", "tv", "policy", "draft-lane", *(() if routes else ("route",))):
            self.query_one(f"#{id}").disabled = True
        self.query_one("#k", Slider).tooltip = why
        self.border_subtitle = "k, D: each server's own" if routes else "k, D, route: fixed by the server"

    def show(self, settings: SpecSettings, seed: int) -> None:
        """Set every control to `settings` (e.g. a reopened session's); each reports its change."""
        self.query_one("#k", Slider).value = min(settings.k, K_MAX)
        self.query_one("#tv", Slider).value = step_from_tv(settings.tv_budget)
        self.query_one("#policy", Select).value = settings.policy
        if settings.route in self._routes:
            self.query_one("#route", Select).value = settings.route
        temperature = self.query_one("#temperature", Select)
        t = settings.sampling.temperature
        if t not in self._temperatures:
            self._temperatures = sorted({*self._temperatures, t})
            temperature.set_options([(f"{v:g}", v) for v in self._temperatures])
        temperature.value = t
        self.query_one("#seed", Input).value = str(seed)

    @staticmethod
    def _k_label(k: int) -> str:
        return f"k (draft length) {k}"

    @staticmethod
    def _tv_label(tv: float) -> str:
        return f"TV budget D {tv:.2f}"

    def on_slider_changed(self, event: Slider.Changed) -> None:
        event.stop()
        if event.slider.id == "k":
            self.query_one("#k-label", Label).update(self._k_label(event.value))
            self.post_message(self.Changed("k", event.value))
        elif event.slider.id == "tv":
            tv = tv_from_step(event.value)
            self.query_one("#tv-label", Label).update(self._tv_label(tv))
            self.post_message(self.Changed("tv_budget", tv))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is Select.BLANK or event.select.id is None:
            return
        self.post_message(self.Changed(event.select.id, event.value))

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self.post_message(self.Changed("draft_lane", event.value))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if event.input.id == "seed" and event.value.isascii() and event.value.isdigit():  # seeds: 0 or more
            self.post_message(self.Changed("seed", int(event.value)))
