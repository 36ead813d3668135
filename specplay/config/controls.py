"""The playground's controls, one row each: what the panel labels, the palette offers and
searches, the flags' help says, and where a change goes.

A control's `id` is its widget's id in the panel and the setting a change names (a SpecSettings
field, a group's field such as temperature, or seed and draft_lane, which only the playground
has). The acceptance rule's knob is one control whose setting is the current rule's knob field.
Adding a control touches its setting (engine/settings.py), its row here and its place in the
panel's layout (ui/widgets/controls_panel.py); the palette, the tooltips, the flags' help and
the controller read this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specplay.engine.controls import SAMPLING_FIELDS
from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE

Widget = Literal["slider", "choice", "switch", "number"]
Reach = Literal["every lane", "speculative lane", "next run"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Control:
    id: str
    label: str
    """What the panel and the palette call it (the knob's panel label names the rule's own knob)."""
    words: str
    """What it does, in the docs' words: its tooltip, its palette entries' help, its flag's help."""
    widget: Widget
    flag: str | None = None
    """The flag that sets it from a command line (one definition of its words)."""

    @property
    def setting(self) -> str:
        """The name a change gives it (widget ids use hyphens, settings underscores)."""
        return self.id.replace("-", "_")

    @property
    def reach(self) -> Reach:
        """Where a change goes while a run goes on: sampling to every lane, so target-only and
        speculative sample the same distribution; the rest to the speculative lane (the route to
        the draft-only lane too, where its drafter writes alone); the seed to the next run."""
        if self.setting in SAMPLING_FIELDS:
            return "every lane"
        return "next run" if self.id in ("seed", "draft-lane") else "speculative lane"


CONTROLS = (
    Control(
        id="k",
        label="k (draft length)",
        words="tokens drafted per round, or where an adaptive policy starts",
        widget="slider",
        flag="--k",
    ),
    Control(
        id="rule",
        label="acceptance rule",
        words="how a drafted token is judged: lossless (mentored at TV budget 0), or a relaxed rule",
        widget="choice",
        flag="--rule",
    ),
    Control(
        id="knob",
        label="the rule's knob",
        words="how far the rule may relax: the TV budget D, typical's ε, lenience λ or the cascade's α",
        widget="slider",
    ),
    Control(
        id="policy",
        label="draft-length policy",
        words="how k is chosen each round: fixed, or adapted to the run",
        widget="choice",
        flag="--policy",
    ),
    Control(
        id="route",
        label="route",
        words=f"which drafter proposes: one pinned, {AUTO_ROUTE} (a router per request), {ADAPTIVE_ROUTE} (each "
        f"round, from what the run measures) or {NONE_ROUTE} (no speculation)",
        widget="choice",
        flag="--route",
    ),
    Control(
        id="counterfactual",
        label="counterfactual",
        words="each round, also judge every other drafter's proposal from the same context (never committed)",
        widget="switch",
        flag="--counterfactual",
    ),
    Control(
        id="temperature",
        label="temperature",
        words="sampling temperature of both lanes; 0 is greedy",
        widget="choice",
        flag="--temperature",
    ),
    Control(
        id="seed", label="seed (next run)", words="the seed the next run starts from", widget="number", flag="--seed"
    ),
    Control(
        id="draft-lane",
        label="draft-only lane",
        words="a third lane: the drafter writing alone, for comparison",
        widget="switch",
    ),
)
"""In the panel's order."""

CONTROL = {control.id: control for control in CONTROLS}
