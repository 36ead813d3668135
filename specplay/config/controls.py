"""The playground's controls, one row each: what the panel labels and shows, the palette offers and
searches, and the flag that sets it from a command line.

A control's `id` is its widget's id in the panel and names the setting a change moves (`setting`:
a SpecSettings field, a group's field such as temperature or k_max, or seed and draft_lane, which
only the playground has). The acceptance rule's knob is one control whose setting is the current
rule's knob field (each rule's settings have their flags from engine/rules.py, in cli/flags.py).

Adding a control takes three files at most (for a new setting, beside the code that acts on it):
- engine/settings.py, only for a new setting: its field, declaring how a live change to it
  re-applies (`live(...)` in its metadata; the engine reads POLICY_FIELDS and STREAM_FIELDS, and
  the module does not import while a setting declares nothing);
- its row here: label, words, its flag (which takes the place of the setting's plain flag in
  cli/flags.py) and, for a control the panel's layout does not place, the values its widget offers;
- ui/widgets/controls_panel.py, only for a place of its own in the panel's layout: any other
  control gets a widget below the rest, built from its row.
The flags (cli/flags.py), the panel's widgets and tooltips and the palette's entries loop over this
table; tests/config/test_add_a_control.py holds a control added in a test module to that. Where a
change goes is the change's own (engine/controls.SettingsChange).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from specplay.config.run_config import RequestConfig
from specplay.engine.rules import LOSSLESS, RULE_NAMES
from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE, POLICIES

FlagGroup = Literal["decoding", "sampling", "policy"]
"""The --help section a flag is listed in (cli/flags.py titles them)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """A setting's command-line flag, as cli/flags.py adds it to each command that runs models.
    It has no argparse default: a command tells the flags the user gave from the rest."""

    name: str
    group: FlagGroup
    type: type[int] | type[float] | None = None
    """int or float (argparse bounds an int as a count, or as a seed for seed); None: a string."""
    switch: bool = False
    """Takes no value: given, the setting is on."""
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    help: str = "{words} (default {default})"
    """A format string: {words} (its control's), {default} (a value: {default:g} formats a float)
    and {rules} (each acceptance rule and what it does)."""
    default: Callable[[], object] | None = None
    """Where the help's {default} comes from; None: the setting's own default (SpecSettings())."""
    setting: str | None = None
    """The setting it sets (its argparse dest); None: its control's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Control:
    id: str
    label: str
    """What the panel and the palette call it (the knob's panel label names the rule's own knob)."""
    words: str
    """What it does, in the docs' words: its tooltip, its palette entries' help, its flag's help."""
    flag: Flag | None = None
    """The flag that sets it from a command line (one definition of its words)."""
    values: tuple[object, ...] = ()
    """What its widget offers where the panel's layout does not place it (a switch, for a bool
    setting, needs none), and the palette with it."""

    @property
    def setting(self) -> str:
        """The setting a change of it names (an id's dashes, as in draft-lane, are underscores)."""
        return self.id.replace("-", "_")


CONTROLS: dict[str, Control] = {
    control.id: control
    for control in (
        Control(
            id="k",
            label="k (draft length)",
            words="tokens drafted per round, or where an adaptive policy starts",
            flag=Flag(name="--k", group="decoding", type=int, help="draft length: {words} (default {default})"),
        ),
        Control(
            id="rule",
            label="acceptance rule",
            words="how a drafted token is judged: lossless (mentored at TV budget 0), or a relaxed rule",
            flag=Flag(
                name="--rule",
                group="decoding",
                choices=(LOSSLESS, *RULE_NAMES),
                help="{words}; lossless (mentored at TV budget 0), {rules}; each keeps what lossless acceptance "
                "keeps, and more (default {default})",
            ),
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
            flag=Flag(name="--policy", group="decoding", choices=POLICIES),
        ),
        Control(
            id="width",
            label="tree width",
            words="draft trees: the most children a level of the draft tree adds, each a drafter's next guess "
            "where it is unsure; 1 drafts a chain",
            flag=Flag(
                name="--width",
                group="decoding",
                type=int,
                metavar="B",
                help="{words} (default {default}; 2 with --tree); k is the tree's depth",
            ),
        ),
        Control(
            id="route",
            label="route",
            words=f"which drafter proposes: one pinned, {AUTO_ROUTE} (a router per request), {ADAPTIVE_ROUTE} (each "
            f"round, from what the run measures) or {NONE_ROUTE} (no speculation)",
            flag=Flag(name="--route", group="decoding", metavar=f"NAME|{AUTO_ROUTE}|{ADAPTIVE_ROUTE}|{NONE_ROUTE}"),
        ),
        Control(
            id="counterfactual",
            label="counterfactual",
            words="each round, also judge every other drafter's proposal from the same context (never committed)",
            flag=Flag(
                name="--counterfactual", group="decoding", switch=True, help="{words}; its cost is reported apart"
            ),
        ),
        Control(
            id="temperature",
            label="temperature",
            words="sampling temperature of both lanes; 0 is greedy",
            flag=Flag(name="--temperature", group="sampling", type=float, help="{words}"),
        ),
        Control(
            id="seed",
            label="seed (next run)",
            words="the seed the next run starts from",
            flag=Flag(name="--seed", group="sampling", type=int, default=lambda: RequestConfig().seed),
        ),
        Control(
            id="draft-lane",
            label="draft-only lane",
            words="a third lane: the drafter writing alone, for comparison",
        ),
    )
}
"""By id, in the panel's order; a registry, as drafters.KINDS: a row added here (a test adds one
with monkeypatch.setitem) is read by the flags, the panel and the palette."""
