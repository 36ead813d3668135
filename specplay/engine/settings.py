"""The settings of one generation. Frozen values: a live change replaces the whole object."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from specplay.errors import ConfigError

Mode = Literal["speculative", "target", "draft"]
MODES: tuple[Mode, ...] = ("speculative", "target", "draft")

PolicyName = Literal["fixed", "acceptance-rate", "accepted-length", "confidence"]
POLICIES: tuple[PolicyName, ...] = ("fixed", "acceptance-rate", "accepted-length", "confidence")

RuleName = Literal["mentored", "typical", "lenience", "cascade"]
RULES: tuple[RuleName, ...] = ("mentored", "typical", "lenience", "cascade")
"""Acceptance rules (engine/accept.py): mentored decoding's TV budget (D = 0 is lossless), Medusa's
typical acceptance, DistillSpec's lenience, speculative cascades."""

KNOBS: dict[RuleName, str] = {
    "mentored": "tv_budget",
    "typical": "typical_epsilon",
    "lenience": "lenience",
    "cascade": "cascade_alpha",
}
"""The setting that moves each rule from (near) lossless to lossy: what a sweep or a slider changes."""
KNOB_SYMBOLS: dict[RuleName, str] = {"mentored": "D", "typical": "ε", "lenience": "λ", "cascade": "α"}
"""Each knob as the papers write it."""

AUTO_ROUTE = "auto"
K_LIMIT = 64  # beyond this a draft is never worth its cost, and a typo is likelier than intent


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


@dataclass(frozen=True, slots=True)
class RuleParams:
    """The knobs of the relaxed acceptance rules beside mentored decoding's TV budget."""

    typical_epsilon: float = 0.09
    """typical: the threshold's cap (Medusa's default)."""
    typical_delta: float | None = None
    """typical: the entropy term's weight; None pairs it with epsilon as Medusa does, sqrt(epsilon)."""
    lenience: float = 2.0
    """lenience: lambda >= 1 in min(1, lambda p_target / p_draft); 1 is lossless."""
    cascade_alpha: float = 0.0
    """cascade: trust the drafter where max p_draft >= max p_target - alpha; -1 never (lossless), 1 always."""

    def __post_init__(self) -> None:
        eps, delta = self.typical_epsilon, self.typical_delta
        _check(0 <= eps < math.inf, "typical_epsilon", f"must be 0 or more and finite (got {eps})")
        _check(delta is None or 0 <= delta < math.inf, "typical_delta", f"must be 0 or more and finite (got {delta})")
        _check(1 <= self.lenience < math.inf, "lenience", f"must be at least 1 and finite (got {self.lenience})")
        alpha = self.cascade_alpha
        _check(-1 <= alpha <= 1, "cascade_alpha", f"must be in [-1, 1] (got {alpha})")

    @property
    def delta(self) -> float:
        return self.typical_delta if self.typical_delta is not None else math.sqrt(self.typical_epsilon)


@dataclass(frozen=True, slots=True)
class AcceptanceRule:
    """The rule a round is judged by, as the engine hands it to a backend."""

    name: RuleName = "mentored"
    tv_budget: float = 0.0
    params: RuleParams = field(default_factory=RuleParams)

    def describe(self) -> str:
        """The rule and its knobs, in a few words (D, epsilon, lambda, alpha as the papers write them)."""
        text = f"{self.name} {KNOB_SYMBOLS[self.name]} {self.knob:g}"
        return text + f" δ {self.params.delta:.3g}" if self.name == "typical" else text

    @property
    def knob(self) -> float:
        """The value of the rule's one swept knob (KNOBS)."""
        return self.tv_budget if self.name == "mentored" else getattr(self.params, KNOBS[self.name])

    @property
    def lossless_when_greedy(self) -> bool:
        """At temperature 0 both distributions are one-hot, so p_target(x) is 0 for any token but
        the argmax: typical acceptance and lenience then keep only argmax matches. Mentored
        decoding with D > 0 keeps a mismatch with probability D; a cascade with alpha >= 0 trusts
        the (equally sure) drafter."""
        if self.name == "cascade":
            return self.params.cascade_alpha < 0
        return self.name != "mentored" or self.tv_budget == 0

    @property
    def lossless(self) -> bool:
        """Exactly the lossless rule whatever the distributions (typical acceptance never is for
        sure: its threshold depends on the target's entropy)."""
        if self.name == "mentored":
            return self.tv_budget == 0
        if self.name == "lenience":
            return self.params.lenience == 1
        return self.name == "cascade" and self.params.cascade_alpha == -1


@dataclass(frozen=True, slots=True)
class SpecSettings:
    """Everything a user may change while a generation runs."""

    k: int = 4
    policy: PolicyName = "fixed"
    route: str = AUTO_ROUTE
    tv_budget: float = 0.0
    """Mentored decoding: how far (in total variation, per token) the output may move toward the drafter."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy_params: PolicyParams = field(default_factory=PolicyParams)
    rule: RuleName = "mentored"
    """The acceptance rule; its knob is tv_budget (mentored) or in rule_params (the others)."""
    rule_params: RuleParams = field(default_factory=RuleParams)
    counterfactual: bool = False
    """Each round, also judge every other drafter's proposal from the same context (never committed)."""

    def __post_init__(self) -> None:
        _check(1 <= self.k <= K_LIMIT, "k", f"must be between 1 and {K_LIMIT} (got {self.k})")
        _check(self.policy in POLICIES, "policy", f"must be one of {', '.join(POLICIES)} (got {self.policy!r})")
        _check(0 <= self.tv_budget <= 1, "tv_budget", f"must be in [0, 1] (got {self.tv_budget})")
        _check(bool(self.route), "route", "must name a drafter or be 'auto'")
        _check(self.rule in RULES, "rule", f"must be one of {', '.join(RULES)} (got {self.rule!r})")

    @property
    def acceptance_rule(self) -> AcceptanceRule:
        return AcceptanceRule(self.rule, self.tv_budget, self.rule_params)

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
