"""The settings of one generation. Frozen values: a live change replaces the whole object."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

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


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(name, message)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How logits become a distribution; applied identically to target and drafter."""

    temperature: float = 0.0
    """0 means greedy: every distribution is one-hot at its argmax."""
    top_p: float = 1.0
    """Keep the most probable tokens whose mass reaches top_p; 1 turns it off."""
    top_k: int = 0
    """Keep the k most probable tokens; 0 turns it off."""
    min_p: float = 0.0
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

    k_min: int = 1
    k_max: int = 8
    low_acceptance: float = 0.4
    """acceptance-rate: k - 1 when a round's accepted/proposed is below this."""
    high_acceptance: float = 0.8
    """acceptance-rate: k + 1 when a round's accepted/proposed is above this."""
    ema_alpha: float = 0.2
    """accepted-length: weight of the newest round in the moving average."""
    confidence_threshold: float = 0.5
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

    k: int = 4
    policy: PolicyName = "fixed"
    route: str = AUTO_ROUTE
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy_params: PolicyParams = field(default_factory=PolicyParams)
    rule: str = MENTORED.name
    """The acceptance rule (rules.RULES); every rule's settings are in rule_params."""
    rule_params: RuleParams = field(default_factory=RuleParams)
    counterfactual: bool = False
    """Each round, also judge every other drafter's proposal from the same context (never committed)."""
    width: int = 1
    """Draft trees (tree.py): the children a level of the tree adds at most; 1 drafts a chain."""
    tree_nodes: int = 0
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

    @property
    def drafts_trees(self) -> bool:
        """Rounds draft trees (a node budget alone drafts a tree of width 1: a chain, judged as a tree)."""
        return self.width > 1 or self.tree_nodes > 0

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
