"""The playground's controls, one row each: what the panel labels, the palette offers and
searches, and the flags' help says.

A control's `id` is its widget's id in the panel and the setting a change names (a SpecSettings
field, a group's field such as temperature, or seed and draft_lane, which only the playground
has). The acceptance rule's knob is one control whose setting is the current rule's knob field.
Adding a control touches its setting (engine/settings.py), its row here and its place in the
panel's layout (ui/widgets/controls_panel.py); the palette, the tooltips and the flags' help read
this table. Where a change goes is the change's own (engine/controls.SettingsChange).
"""

from __future__ import annotations

from dataclasses import dataclass

from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE


@dataclass(frozen=True, slots=True, kw_only=True)
class Control:
    id: str
    label: str
    """What the panel and the palette call it (the knob's panel label names the rule's own knob)."""
    words: str
    """What it does, in the docs' words: its tooltip, its palette entries' help, its flag's help."""
    flag: str | None = None
    """The flag that sets it from a command line (one definition of its words)."""


CONTROLS = (
    Control(
        id="k",
        label="k (draft length)",
        words="tokens drafted per round, or where an adaptive policy starts",
        flag="--k",
    ),
    Control(
        id="rule",
        label="acceptance rule",
        words="how a drafted token is judged: lossless (mentored at TV budget 0), or a relaxed rule",
        flag="--rule",
    ),
    Control(
        id="knob",
        label="the rule's knob",
        words="how far the rule may relax: the TV budget D, typical's ε, lenience λ or the cascade's α",
    ),
    Control(
        id="policy",
        label="draft-length policy",
        words="how k is chosen each round: fixed, or adapted to the run",
        flag="--policy",
    ),
    Control(
        id="width",
        label="tree width",
        words="draft trees: the most children a level of the draft tree adds, each a drafter's next guess "
        "where it is unsure; 1 drafts a chain",
        flag="--width",
    ),
    Control(
        id="route",
        label="route",
        words=f"which drafter proposes: one pinned, {AUTO_ROUTE} (a router per request), {ADAPTIVE_ROUTE} (each "
        f"round, from what the run measures) or {NONE_ROUTE} (no speculation)",
        flag="--route",
    ),
    Control(
        id="counterfactual",
        label="counterfactual",
        words="each round, also judge every other drafter's proposal from the same context (never committed)",
        flag="--counterfactual",
    ),
    Control(
        id="temperature",
        label="temperature",
        words="sampling temperature of both lanes; 0 is greedy",
        flag="--temperature",
    ),
    Control(id="seed", label="seed (next run)", words="the seed the next run starts from", flag="--seed"),
    Control(
        id="draft-lane",
        label="draft-only lane",
        words="a third lane: the drafter writing alone, for comparison",
    ),
)
"""In the panel's order."""

CONTROL = {control.id: control for control in CONTROLS}
