"""The settings of one generation. Frozen values: a live change replaces the whole object.

Each setting declares how a change reaches a generation already running (`Live`, in its field's
metadata), and the engine reads POLICY_FIELDS and STREAM_FIELDS from those declarations: a setting
that declares none stops this module from importing, so a new one cannot be forgotten silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from enum import Enum
from typing import Any, Literal

from specplay.engine.rules import MENTORED, RULES, AcceptanceRule, RuleParams, make_rule
from specplay.errors import ConfigError

Mode = Literal["speculative", "target", "draft"]
MODES: tuple[Mode, ...] = ("speculative", "target", "draft")

PolicyName = Literal["fixed", "acceptance-rate", "accepted-length", "confidence", "cost"]
POLICIES: tuple[PolicyName, ...] = ("fixed", "acceptance-rate", "accepted-length", "confidence", "cost")

AUTO_ROUTE = "auto"
"""The route setting that lets the request router pick one drafter for the whole request."""
ADAPTIVE_ROUTE = "adaptive"
"""The route setting that picks a drafter for every round from what the run measured (routers/rounds.py)."""
NONE_ROUTE = "none"
"""No speculation: the speculative lane's rounds draft nothing, so each is one target step through
the same engine and events. A route like a drafter's (pinned, in a route map, chosen by auto or
adaptive), for where every drafter loses."""
ROUTE_SETTINGS = (AUTO_ROUTE, ADAPTIVE_ROUTE)
"""Route settings that choose a route rather than name one."""
RESERVED_ROUTES = (*ROUTE_SETTINGS, NONE_ROUTE)
"""Routes that are not a drafter's name (no drafter may take one)."""
K_LIMIT = 64  # beyond this a draft is never worth its cost, and a typo is likelier than intent
WIDTH_LIMIT = 8
"""Children of a tree's node at most: past it a sibling's chance is too small to pay for its row."""
TREE_WIDTH = 2
"""The width `--tree N` drafts at when no width is given."""
NODES_LIMIT = K_LIMIT
"""Nodes of a draft tree at most, as a chain's k."""


class Live(Enum):
    """How a live change to a setting re-applies in a generation already running (engine/loop.py)."""

    POLICY = "rebuilds the draft-length policy, which starts again from k"
    STREAM = "closes the pipelined step stream: the token in flight was drawn under the old value"
    READ = "read each round as it is: the next round uses the new value"


LIVE = "live"
"""The key of a setting's declaration in its dataclass field's metadata."""


def live(how: Live) -> Mapping[str, Live]:
    """A field's metadata declaring how a change to it re-applies: `field(default=..., metadata=live(...))`."""
    return {LIVE: how}


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(name, message)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How logits become a distribution; applied identically to target and drafter."""

    temperature: float = field(default=0.0, metadata=live(Live.STREAM))
    """0 means greedy: every distribution is one-hot at its argmax."""
    top_p: float = field(default=1.0, metadata=live(Live.STREAM))
    """Keep the most probable tokens whose mass reaches top_p; 1 turns it off."""
    top_k: int = field(default=0, metadata=live(Live.STREAM))
    """Keep the k most probable tokens; 0 turns it off."""
    min_p: float = field(default=0.0, metadata=live(Live.STREAM))
    """Drop tokens below min_p times the top probability; 0 turns it off."""

    def __post_init__(self) -> None:
        finite = 0 <= self.temperature < math.inf
        _check(finite, "temperature", f"must be 0 or more and finite (got {self.temperature})")
        _check(0 < self.top_p <= 1, "top_p", f"must be in (0, 1] (got {self.top_p})")
        _check(self.top_k >= 0, "top_k", f"must be 0 (off) or more (got {self.top_k})")
        _check(0 <= self.min_p < 1, "min_p", f"must be in [0, 1) (got {self.min_p})")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """Bounds and thresholds of the adaptive draft-length policies."""

    k_min: int = field(default=1, metadata=live(Live.POLICY))
    k_max: int = field(default=8, metadata=live(Live.POLICY))
    low_acceptance: float = field(default=0.4, metadata=live(Live.POLICY))
    """acceptance-rate: k - 1 when a round's accepted/proposed is below this."""
    high_acceptance: float = field(default=0.8, metadata=live(Live.POLICY))
    """acceptance-rate: k + 1 when a round's accepted/proposed is above this."""
    ema_alpha: float = field(default=0.2, metadata=live(Live.POLICY))
    """accepted-length: weight of the newest round in the moving average."""
    confidence_threshold: float = field(default=0.5, metadata=live(Live.POLICY))
    """confidence: stop drafting once the estimated chance of a rejection exceeds this."""

    def __post_init__(self) -> None:
        _check(1 <= self.k_min <= K_LIMIT, "k_min", f"must be between 1 and {K_LIMIT} (got {self.k_min})")
        _check(self.k_min <= self.k_max <= K_LIMIT, "k_max", f"must be between k_min and {K_LIMIT} (got {self.k_max})")
        _check(0 <= self.low_acceptance <= 1, "low_acceptance", f"must be in [0, 1] (got {self.low_acceptance})")
        _check(
            self.low_acceptance < self.high_acceptance <= 1,
            "high_acceptance",
            f"must be above low_acceptance and at most 1 (got {self.high_acceptance})",
        )
        _check(0 < self.ema_alpha <= 1, "ema_alpha", f"must be in (0, 1] (got {self.ema_alpha})")
        _check(
            0 < self.confidence_threshold < 1,
            "confidence_threshold",
            f"must be in (0, 1) (got {self.confidence_threshold})",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecSettings:
    """Everything a user may change while a generation runs."""

    k: int = field(default=4, metadata=live(Live.POLICY))
    policy: PolicyName = field(default="fixed", metadata=live(Live.POLICY))
    route: str = field(default=AUTO_ROUTE, metadata=live(Live.STREAM))
    """A drafter's name or a route setting; the run also resolves a new route to a drafter by name."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """A group: each of its fields declares its own re-application."""
    policy_params: PolicyParams = field(default_factory=PolicyParams)
    """A group: each of its fields declares its own re-application."""
    rule: str = field(default=MENTORED.name, metadata=live(Live.READ))
    """The acceptance rule (rules.RULES); every rule's settings are in rule_params."""
    rule_params: RuleParams = field(default_factory=RuleParams, metadata=live(Live.READ))
    """A group declared as a whole: the run makes its rule anew from the settings at every change,
    so every rule's setting (rules.py's, none of them declared there) is read as it is."""
    counterfactual: bool = field(default=False, metadata=live(Live.READ))
    """Each round, also judge every other drafter's proposal from the same context (never committed)."""
    width: int = field(default=1, metadata=live(Live.POLICY))
    """Draft trees (tree.py): the children a level of the tree adds at most; 1 drafts a chain.
    It rebuilds the policy: a tree verifies more rows than its depth, and `cost` learns the new shape afresh."""
    tree_nodes: int = field(default=0, metadata=live(Live.POLICY))
    """A tree's nodes at most (the verify pass's rows but one); 0: width x k."""

    def __post_init__(self) -> None:
        _check(1 <= self.k <= K_LIMIT, "k", f"must be between 1 and {K_LIMIT} (got {self.k})")
        _check(1 <= self.width <= WIDTH_LIMIT, "width", f"must be between 1 and {WIDTH_LIMIT} (got {self.width})")
        _check(
            0 <= self.tree_nodes <= NODES_LIMIT,
            "tree",
            f"must be between 1 and {NODES_LIMIT} nodes, or 0 for width x k (got {self.tree_nodes})",
        )
        _check(self.policy in POLICIES, "policy", f"must be one of {', '.join(POLICIES)} (got {self.policy!r})")
        _check(bool(self.route), "route", "must name a drafter, or be 'auto', 'adaptive' or 'none'")
        _check(self.rule in RULES, "rule", f"must be one of {', '.join(RULES)} (got {self.rule!r})")

    @property
    def acceptance_rule(self) -> AcceptanceRule:
        return make_rule(self.rule, self.rule_params)

    def changed(self, **changes: object) -> SpecSettings:
        """A copy with `changes`; the fields of sampling, policy_params and rule_params
        (temperature, k_max, lenience...) may be given directly."""
        for group in GROUPS:
            inner = getattr(self, group)
            given = {k: changes.pop(k) for k in list(changes) if k in type(inner).__dataclass_fields__}
            if given:
                changes[group] = replace(inner, **given)
        return replace(self, **changes)  # type: ignore[arg-type]


GROUPS = ("sampling", "policy_params", "rule_params")
"""SpecSettings' fields that group settings of their own (flattened in control events)."""


def flattened(settings: SpecSettings) -> dict[str, Any]:
    """Every setting by its name, the groups' fields (temperature, k_max...) by their own, in field order."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.name in GROUPS:
            out.update({g.name: getattr(value, g.name) for g in fields(value)})
        else:
            out[f.name] = value
    return out


def live_declarations(settings: SpecSettings) -> dict[str, Live]:
    """How each flattened setting of `settings` re-applies live, from its declaration (a group's
    own declaration covers those of its fields that declare none). A setting without one raises
    TypeError naming it: a change to it would otherwise be taken and silently never applied."""

    def declared(f: Field[Any], fallback: Live | None, where: str) -> Live:
        how = f.metadata.get(LIVE, fallback)
        if not isinstance(how, Live):
            raise TypeError(f"{where}.{f.name} declares no live re-application: give it metadata=live(Live...)")
        return how

    out: dict[str, Live] = {}
    for f in fields(settings):
        if f.name in GROUPS:
            group = getattr(settings, f.name)
            found = {g.name: declared(g, f.metadata.get(LIVE), type(group).__name__) for g in fields(group)}
        else:
            found = {f.name: declared(f, None, type(settings).__name__)}
        if clash := found.keys() & out.keys():  # flattened names are how a change names a setting
            raise TypeError(f"two settings flatten to the same name: {', '.join(sorted(clash))}")
        out.update(found)
    return out


LIVE_SETTINGS = live_declarations(SpecSettings())
"""Every flattened setting and how a live change to it re-applies."""
POLICY_FIELDS = frozenset(name for name, how in LIVE_SETTINGS.items() if how is Live.POLICY)
"""Settings whose change rebuilds the run's draft-length policy."""
STREAM_FIELDS = frozenset(name for name, how in LIVE_SETTINGS.items() if how is Live.STREAM)
"""Settings whose change closes the pipelined step stream, so the next token is drawn under it."""
