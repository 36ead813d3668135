"""The live controls: k, the acceptance rule and its knob, policy, route (with counterfactual
routes), temperature, seed.

The panel only reports changes (ControlsPanel.Changed); the app decides which lane's LiveControls
they go to. Seed is not live: it seeds the next run. The layout below places the controls it knows;
any other control of the table (config/controls.py) gets a widget below them, built from its row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Select, Static, Switch
from textual_slider import Slider

from specplay.config.controls import CONTROLS, Control
from specplay.config.numbers import SEED_MAX, seed_number
from specplay.engine.live_controls import SAMPLING_FIELDS
from specplay.engine.rules import KNOB_STEPS, RULE_NAMES, AcceptanceRule
from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE, POLICIES, SpecSettings, flattened

K_MAX = 16
WIDTHS = tuple(range(1, 5))
"""The tree widths the panel offers (`--width` goes to WIDTH_LIMIT): past 4 a sibling rarely pays its row."""
TEMPERATURES = (0.0, 0.3, 0.7, 1.0)
PLACED = frozenset(
    {"k", "rule", "knob", "policy", "route", "width", "counterfactual", "temperature", "seed", "draft-lane"}
)
"""The controls `compose` lays out itself; the table's others get a widget of their own below them."""


def step_from_knob(rule: AcceptanceRule) -> int:
    """The slider step nearest `rule`'s knob (a session's or a flag's value may lie between steps)."""

    def distance(step: int) -> float:
        at_step = rule.slider_value(step)
        if rule.knob.log_scale and rule.value > 0:
            return abs(math.log(at_step / rule.value))
        return abs(at_step - rule.value)

    return min(range(KNOB_STEPS + 1), key=distance)


def knob_label(rule: AcceptanceRule) -> str:
    return f"{rule.knob.label} {rule.knob.symbol} {rule.value:.3g}"


class ControlsPanel(VerticalScroll, can_focus=False):
    """Not a tab stop itself: its controls are, and focusing one scrolls it into view."""

    DEFAULT_CSS = """
    ControlsPanel { width: 36; border: round $spec-border; padding: 0 1; }
    ControlsPanel Label { color: $text-muted; }
    ControlsPanel Slider { width: 100%; }
    ControlsPanel Select, ControlsPanel Input { width: 100%; }
    ControlsPanel .switch-row { height: auto; margin-top: 1; }
    ControlsPanel .switch-row Label { margin: 1 0 0 1; }
    ControlsPanel .pair { height: auto; }
    ControlsPanel .pair Vertical { width: 1fr; height: auto; }
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
        """The rule and knobs shown: the knob slider moves the current rule's knob."""
        self._knob_shown = -1
        self._route_stats_shown = ""
        self._seed = seed
        self._routes = [settings.route]
        self._rules = list(RULE_NAMES)
        self._temperatures = sorted({*TEMPERATURES, settings.sampling.temperature})
        self._own_values: dict[str, list[object]] = {}
        """What each control without a place in the layout offers (its row's values, and the value it had)."""

    def compose(self) -> ComposeResult:
        s = self._settings
        yield Label(self._k_label(s.k), id="k-label")
        yield Slider(1, K_MAX, value=min(s.k, K_MAX), id="k")
        yield Label(CONTROLS["rule"].label)
        yield Select([(r, r) for r in RULE_NAMES], value=s.rule, allow_blank=False, id="rule")
        rule = s.acceptance_rule
        yield Label(knob_label(rule), id="knob-label")
        yield Slider(0, KNOB_STEPS, value=step_from_knob(rule), id="knob")
        yield Label(CONTROLS["policy"].label)
        yield Select([(p, p) for p in POLICIES], value=s.policy, allow_blank=False, id="policy")
        with Horizontal(classes="pair"):
            with Vertical():
                yield Label(CONTROLS["route"].label)
                yield Select([(s.route, s.route)], value=s.route, allow_blank=False, id="route")
            with Vertical():
                yield Label(CONTROLS["width"].label)
                yield Select([(_width(w), w) for w in WIDTHS], value=s.width, allow_blank=False, id="width")
        with Horizontal(classes="switch-row"):
            yield Switch(s.counterfactual, id="counterfactual")
            yield Label(CONTROLS["counterfactual"].label)
        yield Static("", id="route-stats")
        with Horizontal(classes="pair"):  # side by side: every control fits at 50 rows, plots below
            with Vertical():
                yield Label(CONTROLS["temperature"].label)
                yield Select(
                    [(f"{t:g}", t) for t in self._temperatures],
                    value=s.sampling.temperature,
                    allow_blank=False,
                    id="temperature",
                )
            with Vertical():
                yield Label(CONTROLS["seed"].label)
                yield Input(str(self._seed), type="integer", max_length=len(str(SEED_MAX)), id="seed")
        with Horizontal(classes="switch-row"):
            yield Switch(False, id="draft-lane")
            yield Label(CONTROLS["draft-lane"].label)
        for control in CONTROLS.values():
            if control.id not in PLACED:
                yield from self._own_widget(control, flattened(s)[control.setting])

    def _own_widget(self, control: Control, value: object) -> ComposeResult:
        """A control the layout does not place: a switch for a bool setting, else a choice of its values."""
        if isinstance(value, bool):
            with Horizontal(classes="switch-row"):
                yield Switch(value, id=control.id)
                yield Label(control.label)
            return
        self._own_values[control.id] = [*control.values, *(() if value in control.values else (value,))]
        yield Label(control.label)
        options = [(_shown(v), v) for v in self._own_values[control.id]]
        yield Select(options, value=value, allow_blank=False, id=control.id)

    def on_mount(self) -> None:
        for control in CONTROLS.values():  # what each control does, where it stands
            self.query_one(f"#{control.id}").tooltip = control.words

    def set_drafters(self, drafters: Sequence[str], round_routes: bool = True) -> None:
        """The routes to offer: auto, adaptive where drafters can change between rounds (between
        them and `none`), each drafter, and none (no speculation)."""
        route = self.query_one("#route", Select)
        current = route.value
        names = [AUTO_ROUTE, *([ADAPTIVE_ROUTE] if round_routes and drafters else []), *drafters, NONE_ROUTE]
        self._routes = names
        # New options reset the value: no message, or a run already going would get a route change.
        with self.prevent(Select.Changed):
            route.set_options([(name, name) for name in names])
            route.value = current if current in names else AUTO_ROUTE

    def limit_to(self, rules: Sequence[str], counterfactual: bool, trees: bool) -> None:
        """Offer only the rules the backend can judge, counterfactual routes and trees where it can run them."""
        select = self.query_one("#rule", Select)
        self._rules = list(rules)
        if self._settings.rule in rules:
            with self.prevent(Select.Changed):  # as for the routes: options offered, no setting changed
                select.set_options([(r, r) for r in rules])
                select.value = self._settings.rule
        else:  # the rule shown cannot run here: the first that can takes its place, as a change
            select.set_options([(r, r) for r in rules])
        if not trees:
            width = self.query_one("#width", Select)
            width.disabled = True
            width.tooltip = "this backend verifies chains only: draft trees run on MLX"
        switch = self.query_one("#counterfactual", Switch)
        switch.disabled = not counterfactual
        if not counterfactual:
            switch.tooltip = "this backend cannot judge other drafters' proposals: counterfactual routes run on MLX"

    def show_route_stats(self, text: str) -> None:
        if text != self._route_stats_shown:  # an update re-lays the panel out: not every frame
            self._route_stats_shown = text
            self.query_one("#route-stats", Static).update(text)

    def fix_speculation(self, why: str, routes: bool) -> None:
        """Native mode: each server fixes k, the rule, the policy and its drafter; their
        controls stay visible, read-only, with the reason. `routes`: several servers to route to."""
        # Both lanes' requests still carry the sampling, and the seed is the next run's: the rest is the servers'.
        kept = {*SAMPLING_FIELDS, "seed", *(("route",) if routes else ())}
        for control in CONTROLS.values():
            if control.setting not in kept:
                self.query_one(f"#{control.id}").disabled = True
        self.query_one("#k", Slider).tooltip = why
        self.border_subtitle = "k, D: each server's own" if routes else "k, D, route: fixed by the server"

    def show(self, settings: SpecSettings, seed: int) -> None:
        """Set every control to `settings` (e.g. a reopened session's); each reports its change."""
        self.query_one("#k", Slider).value = min(settings.k, K_MAX)
        self._settings = settings
        self.query_one("#rule", Select).value = settings.rule
        self._show_knob(settings)
        self.query_one("#counterfactual", Switch).value = settings.counterfactual
        self.query_one("#policy", Select).value = settings.policy
        self.query_one("#width", Select).value = settings.width
        if settings.route in self._routes:
            self.query_one("#route", Select).value = settings.route
        temperature = self.query_one("#temperature", Select)
        t = settings.sampling.temperature
        if t not in self._temperatures:
            self._temperatures = sorted({*self._temperatures, t})
            temperature.set_options([(f"{v:g}", v) for v in self._temperatures])
        temperature.value = t
        self.query_one("#seed", Input).value = str(seed)
        values = flattened(settings)
        for control in CONTROLS.values():
            if control.id in PLACED:
                continue
            value, widget = values[control.setting], self.query_one(f"#{control.id}")
            if isinstance(widget, Select) and value not in self._own_values[control.id]:
                self._own_values[control.id].append(value)
                widget.set_options([(_shown(v), v) for v in self._own_values[control.id]])
            widget.value = value  # type: ignore[attr-defined]

    def choices(self) -> Iterator[tuple[str, str, Callable[[], None]]]:
        """(title, help, action) for the command palette: every value a control offers, set as if
        the user moved the control (so it reports its change the same way), titled by the
        control's label (the palette searches titles). Fixed controls offer none."""

        def setter(id: str, value: object) -> Callable[[], None]:
            def set_value() -> None:
                self.query_one(f"#{id}").value = value  # type: ignore[attr-defined]

            return set_value

        rule = self._settings.acceptance_rule
        field = rule.knob.setting.field
        knob_steps = [replace(rule, **{field: rule.slider_value(step)}) for step in range(KNOB_STEPS + 1)]
        offered: dict[str, list[tuple[str, object]]] = {
            "k": [(f" = {k}", k) for k in range(1, K_MAX + 1)],
            "rule": [(f": {r}", r) for r in self._rules],
            "knob": [(f": {knob_label(at)}", step) for step, at in enumerate(knob_steps)],
            "policy": [(f": {p}", p) for p in POLICIES],
            "width": [(f": {_width(w)}", w) for w in WIDTHS],
            "route": [(f": {r}", r) for r in self._routes],
            "temperature": [(f": {t:g}", t) for t in self._temperatures],
        } | {id: [(f": {_shown(v)}", v) for v in values] for id, values in self._own_values.items()}
        for control in CONTROLS.values():
            widget = self.query_one(f"#{control.id}")
            if widget.disabled:
                continue
            if control.id in offered:
                for shown, value in offered[control.id]:
                    yield f"{control.label}{shown}", control.words, setter(control.id, value)
            elif isinstance(widget, Switch):
                yield f"{control.label} on/off", control.words, widget.toggle
            else:
                yield control.label, control.words, widget.focus

    @staticmethod
    def _k_label(k: int) -> str:
        return f"{CONTROLS['k'].label} {k}"

    def _show_knob(self, settings: SpecSettings) -> None:
        rule = settings.acceptance_rule
        self.query_one("#knob-label", Label).update(knob_label(rule))
        slider = self.query_one("#knob", Slider)
        self._knob_shown = step_from_knob(rule)
        slider.value = self._knob_shown

    def on_slider_changed(self, event: Slider.Changed) -> None:
        event.stop()
        if event.slider.id == "k":
            self.query_one("#k-label", Label).update(self._k_label(event.value))
            self.post_message(self.Changed("k", event.value))
        elif event.slider.id == "knob" and event.value != self._knob_shown:
            self._knob_shown = event.value
            knob = self._settings.acceptance_rule.knob.setting.field
            value = self._settings.acceptance_rule.slider_value(event.value)
            self._settings = self._settings.changed(**{knob: value})
            self.query_one("#knob-label", Label).update(knob_label(self._settings.acceptance_rule))
            self.post_message(self.Changed(knob, value))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is Select.BLANK or event.select.id is None:
            return
        if event.select.id == "rule":  # the slider now moves this rule's knob, from its current value
            self._settings = self._settings.changed(rule=event.value)
            self._show_knob(self._settings)
        self.post_message(self.Changed(CONTROLS[event.select.id].setting, event.value))

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        if event.switch.id in CONTROLS:
            self.post_message(self.Changed(CONTROLS[event.switch.id].setting, event.value))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if event.input.id == "seed" and event.value.isascii() and event.value.isdigit():  # seeds: 0 or more
            try:
                seed = seed_number(event.value)
            except ValueError as error:  # the next run keeps the last good seed
                event.input.set_class(True, "-invalid")
                self.notify(f"seed {error}", severity="warning", markup=False)
                return
            event.input.set_class(False, "-invalid")
            self.post_message(self.Changed("seed", seed))


def _width(width: int) -> str:
    return "chain" if width == 1 else str(width)


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
