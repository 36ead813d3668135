"""The acceptance rules: one object each, and the registry every layer reads them from.

Every rule judges a drafted token x ~ p_draft by an acceptance probability a(x) and, after a
rejection, draws the correction from the lossless residual norm(max(p_target - p_draft, 0)), so
its output at a position is exact (`accept.rule_output_distribution`) and so is the TV it moves
that output from the target. a(x) = min(1, p_target(x) / p_draft(x)) is lossless (Leviathan et
al. 2023); each rule below keeps at least what lossless acceptance keeps under the same draw.

A rule's `acceptance` is written once, over arrays: rows [positions, vocab] with `xp` numpy or
mlx.core (the exact output, the MLX kernels), or one position's floats with `xp` SCALARS (the
engine's judge). A rule is a frozen value whose fields are its settings (`Mentored(tv_budget=0.3)`);
RuleParams keeps every rule's settings at once, as a user's settings do.

Adding a rule touches this module and its tests only: its class, its fields in RuleParams, its
entry in RULES. The CLI's flags and choices, the playground's rule control, fidelity's sweeps,
the MLX kernels and the capabilities of each backend read the registry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from specplay.engine.accept import (
    SCALARS,
    Array,
    entropy,
    lossless_acceptance,
    residual_distribution,
    rule_output_distribution,
    tv_distance,
)
from specplay.errors import ConfigError

Stats = Mapping[str, Any]
"""What a rule reads at a position beyond p_target(x) and p_draft(x): "tv" (d = TV(p_target,
p_draft), always there) and the statistics its `statistics` names; floats for one position,
arrays [positions, 1] for rows."""

KNOB_STEPS = 20
"""A knob's slider runs over integer steps 0..KNOB_STEPS, lossless (or nearly) at 0."""
_TINY = 1e-30


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting of a rule: its field (in the rule, in RuleParams, in session files), its flag,
    and the values it may take."""

    field: str
    flag: str
    metavar: str
    help: str
    low: float
    high: float = math.inf
    """math.inf: any finite value from `low` up."""
    optional: bool = False
    """None is allowed: the rule derives the value (typical's delta follows epsilon)."""

    def check(self, value: float | None) -> None:
        if value is None and self.optional:
            return
        if self.high == math.inf:
            ok = value is not None and self.low <= value < math.inf
            wanted = f"must be {'0 or more' if self.low == 0 else f'at least {self.low:g}'} and finite"
        else:
            ok = value is not None and self.low <= value <= self.high
            wanted = f"must be in [{self.low:g}, {self.high:g}]"
        if not ok:
            raise ConfigError(self.field, f"{wanted} (got {value})", flag=self.flag)


@dataclass(frozen=True, slots=True)
class Knob:
    """The setting that moves a rule from (near) lossless to loose: what a slider or a sweep moves."""

    setting: Setting
    symbol: str
    """As the papers write it: D, ε, λ, α."""
    label: str
    """What the playground calls the knob."""
    lossless: float | None
    """The value at which the rule is exactly lossless (None: no single value is)."""
    sweep: tuple[float, ...]
    """The values a fidelity sweep tries when none are given: from nearly lossless to loose."""
    log_scale: bool = False
    """The slider's steps are even in log(value) rather than in value."""


class AcceptanceRule:
    """An acceptance rule (subclasses are frozen dataclasses whose fields are its settings)."""

    name: ClassVar[str]
    description: ClassVar[str]
    knob: ClassVar[Knob]
    settings: ClassVar[tuple[Setting, ...]]
    """Every field of the rule, its knob first."""
    full_distributions: ClassVar[bool] = True
    """Its acceptance and TV need whole distributions; False where d alone does (a top-K bracket
    of d keeps the budget, so a backend that knows only the top-K can judge it)."""

    def acceptance(self, p_target: Array, p_draft: Array, stats: Stats, xp: Any) -> Array:
        """a(x) for the drafted token (floats, `xp` SCALARS) or for every token of each row."""
        raise NotImplementedError

    def statistics(self, p_target: Array, p_draft: Array, xp: Any) -> dict[str, Array]:
        """What `acceptance` reads, from rows [positions, vocab] (kept [positions, 1]). A backend
        reports each but d (which it always reports) at every drafted position."""
        return {}

    def slider_value(self, step: int) -> float:
        """The knob's value at slider step 0..KNOB_STEPS."""
        raise NotImplementedError

    @property
    def value(self) -> float:
        """The knob's value."""
        return getattr(self, self.knob.setting.field)

    @property
    def lossless(self) -> bool:
        """Exactly the lossless rule, whatever the distributions."""
        return self.value == self.knob.lossless

    @property
    def lossless_when_greedy(self) -> bool:
        """At temperature 0 both distributions are one-hot, so p_target(x) = 0 for any token but
        the argmax. A rule that then keeps only argmax matches gives greedy target-only output."""
        return True

    def theta(self, tv: float) -> float:
        """Mentored decoding's interpolation weight at a position of distance d; 0 elsewhere."""
        return 0.0

    def accept_probability(self, p_target_x: float, p_draft_x: float, stats: Stats) -> float:
        """a(x) at one drafted position, as the engine judges it."""
        if self.lossless:  # a knob at its lossless end reads nothing else (and no backend sent it)
            return lossless_acceptance(p_target_x, p_draft_x, SCALARS)
        return self.acceptance(p_target_x, p_draft_x, stats, SCALARS)

    def acceptance_rows(self, p_target: Array, p_draft: Array, xp: Any) -> Array:
        """a(y) for every token of each row [positions, vocab], its statistics taken from the rows
        themselves: what a backend holding full distributions computes."""
        return self.acceptance(p_target, p_draft, self.statistics(p_target, p_draft, xp), xp)

    def output_distribution(self, p_target: Array, p_draft: Array, xp: Any) -> Array:
        """pi: what each row's position emits under the rule, exactly (accept.rule_output_distribution)."""
        acceptance = self.acceptance_rows(p_target, p_draft, xp)
        return rule_output_distribution(p_draft, acceptance, residual_distribution(p_target, p_draft, xp), xp)

    def tv_spent(self, p_target: Array, p_draft: Array, xp: Any) -> Array:
        """TV(pi, p_target) at each row: how far the rule moves that position's output from the target."""
        return tv_distance(self.output_distribution(p_target, p_draft, xp), p_target)

    def describe(self) -> str:
        """The rule and its knob in a few words, as the papers write them."""
        return f"{self.name} {self.knob.symbol} {self.value:g}"

    def named(self) -> str:
        """What a run's line and the playground call the rule: "lossless" first where it is exactly that."""
        return f"{LOSSLESS} ({self.describe()})" if self.lossless else self.describe()

    def row_label(self) -> str:
        """The rule's row in a fidelity sweep."""
        return f"{self.name} {self.knob.symbol}={self.value:g}"

    @classmethod
    def from_params(cls, params: RuleParams) -> AcceptanceRule:
        return cls(**{s.field: getattr(params, s.field) for s in cls.settings})

    def into_params(self, params: RuleParams) -> RuleParams:
        """`params` with this rule's settings."""
        return replace(params, **{s.field: getattr(self, s.field) for s in self.settings})


@dataclass(frozen=True)
class Mentored(AcceptanceRule):
    """Mentored decoding with TV budget D: the output follows pi = (1 - theta) p_target + theta
    p_draft with theta = min(1, D / d) (theta = 1 where d = 0), so TV(pi, p_target) = min(d, D):
    it moves at most D from the target, as far toward the drafter as the budget allows. A token is
    accepted with min(1, pi(x) / p_draft(x)): the acceptance rate becomes 1 - max(0, d - D) where
    lossless gives 1 - d. At temperature 0 a mismatching draft (d = 1) is kept with probability
    D. D = 0 is lossless."""

    tv_budget: float = 0.0

    name: ClassVar[str] = "mentored"
    description: ClassVar[str] = "the TV budget: the output moves at most D from the target"
    knob: ClassVar[Knob] = Knob(
        Setting(
            field="tv_budget",
            flag="--tv",
            metavar="D",
            help="TV budget of mentored decoding: 0 lossless, 1 accepts every draft",
            low=0.0,
            high=1.0,
        ),
        symbol="D",
        label="TV budget",
        lossless=0.0,
        sweep=(0.0, 0.25, 0.5, 0.75, 1.0),
    )
    settings: ClassVar[tuple[Setting, ...]] = (knob.setting,)
    full_distributions: ClassVar[bool] = False

    def statistics(self, p_target: Array, p_draft: Array, xp: Any) -> dict[str, Array]:
        return {"tv": tv_distance(p_target, p_draft)[..., None]}

    def acceptance(self, p_target: Array, p_draft: Array, stats: Stats, xp: Any) -> Array:
        tv = stats["tv"]
        theta = mentored_theta(tv, self.tv_budget, xp)
        return lossless_acceptance(mentored_distribution(p_target, p_draft, theta), p_draft, xp)

    def theta(self, tv: float) -> float:
        return mentored_theta(tv, self.tv_budget)

    def slider_value(self, step: int) -> float:
        return round(step / KNOB_STEPS, 4)  # D in steps of 0.05

    @property
    def lossless_when_greedy(self) -> bool:
        return self.tv_budget == 0

    def row_label(self) -> str:
        return f"D={self.tv_budget:g}"  # as reports have always named mentored rows


def mentored_theta(tv: Array, tv_budget: float, xp: Any = SCALARS) -> Array:
    """theta = min(1, D / d), and 1 where d = 0 (D = 0 then gives pi = p_target wherever d > 0)."""
    return xp.where(tv > 0, xp.minimum(1.0, tv_budget / xp.maximum(tv, _TINY)), 1.0)


def mentored_distribution(p_target: Array, p_draft: Array, theta: Array) -> Array:
    """pi = (1 - theta) p_target + theta p_draft: the target moved theta of the way to the drafter."""
    return (1.0 - theta) * p_target + theta * p_draft


@dataclass(frozen=True)
class Typical(AcceptanceRule):
    """Typical acceptance (Medusa, Cai et al. 2024) judges by the target alone: x is typical when
    p_target(x) > min(epsilon, delta exp(-H(p_target))), a threshold that falls where the target is
    unsure; typical tokens are kept, the others judged losslessly under the same draw. It adds
    nothing only where the threshold is at least 1: epsilon >= 1 and delta exp(-H) >= 1 (H <= ln
    vocabulary, so delta >= the vocabulary size is enough); no single epsilon is lossless."""

    typical_epsilon: float = 0.09
    typical_delta: float | None = None
    """None pairs delta with epsilon as Medusa does: sqrt(epsilon)."""

    name: ClassVar[str] = "typical"
    description: ClassVar[str] = "Medusa's typical acceptance: keep what the target finds typical"
    knob: ClassVar[Knob] = Knob(
        Setting(
            field="typical_epsilon",
            flag="--typical-epsilon",
            metavar="E",
            help="typical: keep x when p_target(x) > min(E, DELTA exp(-H))",
            low=0.0,
        ),
        symbol="ε",
        label="typical",
        lossless=None,
        sweep=(0.3, 0.1, 0.03, 0.01, 0.003),
        log_scale=True,
    )
    settings: ClassVar[tuple[Setting, ...]] = (
        knob.setting,
        Setting(
            field="typical_delta",
            flag="--typical-delta",
            metavar="DELTA",
            help="typical: the entropy term's weight (default sqrt(E), as Medusa)",
            low=0.0,
            optional=True,
        ),
    )

    @property
    def delta(self) -> float:
        return self.typical_delta if self.typical_delta is not None else math.sqrt(self.typical_epsilon)

    def acceptance(self, p_target: Array, p_draft: Array, stats: Stats, xp: Any) -> Array:
        threshold = typical_threshold(stats["entropy"], self.typical_epsilon, self.delta, xp)
        return xp.where(p_target > threshold, 1.0, lossless_acceptance(p_target, p_draft, xp))

    def statistics(self, p_target: Array, p_draft: Array, xp: Any) -> dict[str, Array]:
        return {"entropy": entropy(p_target, xp)[..., None]}

    def slider_value(self, step: int) -> float:
        return float(f"{10 ** (2 - 5 * step / KNOB_STEPS):.3g}")  # 100 down to 0.001, even in log

    def describe(self) -> str:
        return super().describe() + f" δ {self.delta:.3g}"


def typical_threshold(entropy_nats: Array, epsilon: float, delta: float, xp: Any) -> Array:
    """min(epsilon, delta exp(-H)): above it a token is typical."""
    return xp.minimum(epsilon, delta * xp.exp(-entropy_nats))


@dataclass(frozen=True)
class Lenience(AcceptanceRule):
    """Lenience (DistillSpec, Zhou et al. 2024; Leviathan et al. 2023, appendix): accept with
    min(1, lambda p_target(x) / p_draft(x)), lambda >= 1; lambda = 1 is lossless."""

    lenience: float = 2.0

    name: ClassVar[str] = "lenience"
    description: ClassVar[str] = "DistillSpec's lenience: the target's probability counts lambda times"
    knob: ClassVar[Knob] = Knob(
        Setting(
            field="lenience",
            flag="--lenience",
            metavar="LAMBDA",
            help="lenience: accept with min(1, LAMBDA p_target/p_draft), 1 lossless",
            low=1.0,
        ),
        symbol="λ",
        label="lenience",
        lossless=1.0,
        sweep=(1.5, 2.0, 4.0, 8.0, 16.0),
        log_scale=True,
    )
    settings: ClassVar[tuple[Setting, ...]] = (knob.setting,)

    def acceptance(self, p_target: Array, p_draft: Array, stats: Stats, xp: Any) -> Array:
        return lossless_acceptance(self.lenience * p_target, p_draft, xp)

    def slider_value(self, step: int) -> float:
        return float(f"{2 ** (step / 4):.3g}")  # 1 to 32, doubling every 4 steps


@dataclass(frozen=True)
class Cascade(AcceptanceRule):
    """Speculative cascades (Narasimhan et al. 2024) with the Diff deferral rule: where the drafter
    is about as sure as the target, max p_draft >= max p_target - alpha, the output follows the
    drafter (its token is kept); elsewhere it defers to the target (lossless). alpha = -1 never
    trusts the drafter (lossless); alpha = 1 always does."""

    cascade_alpha: float = 0.0

    name: ClassVar[str] = "cascade"
    description: ClassVar[str] = "speculative cascades: follow the drafter where it is about as sure"
    knob: ClassVar[Knob] = Knob(
        Setting(
            field="cascade_alpha",
            flag="--cascade-alpha",
            metavar="A",
            help="cascade: follow the drafter where max p_draft >= max p_target - A; -1 lossless, 1 accepts "
            "every draft",
            low=-1.0,
            high=1.0,
        ),
        symbol="α",
        label="cascade",
        lossless=-1.0,
        sweep=(-0.2, 0.0, 0.1, 0.2, 0.4),
    )
    settings: ClassVar[tuple[Setting, ...]] = (knob.setting,)

    def acceptance(self, p_target: Array, p_draft: Array, stats: Stats, xp: Any) -> Array:
        trusted = stats["max_p_draft"] >= stats["max_p_target"] - self.cascade_alpha
        return xp.where(trusted, 1.0, lossless_acceptance(p_target, p_draft, xp))

    def statistics(self, p_target: Array, p_draft: Array, xp: Any) -> dict[str, Array]:
        return {
            "max_p_target": p_target.max(axis=-1, keepdims=True),
            "max_p_draft": p_draft.max(axis=-1, keepdims=True),
        }

    def slider_value(self, step: int) -> float:
        return round(-1 + step / 10, 4)  # -1 to 1 in steps of 0.1

    @property
    def lossless_when_greedy(self) -> bool:
        return self.cascade_alpha < 0  # alpha >= 0 trusts an (equally sure) one-hot drafter


MENTORED = Mentored()
"""The default rule, lossless: D = 0."""

RULES: dict[str, type[AcceptanceRule]] = {rule.name: rule for rule in (Mentored, Typical, Lenience, Cascade)}
"""Every acceptance rule by name, in the order users see them."""
RULE_NAMES: tuple[str, ...] = tuple(RULES)
LOSSLESS = "lossless"
"""What the docs and the panel call the lossless rule: mentored decoding at its knob's lossless
end (TV budget 0), the default. A name a command line may give for it, not a rule of its own."""
KNOB_FIELDS = frozenset(rule.knob.setting.field for rule in RULES.values())


@dataclass(frozen=True, slots=True)
class RuleParams:
    """Every rule's settings at once (the knob of one rule stays put while another is chosen)."""

    tv_budget: float = 0.0
    typical_epsilon: float = 0.09
    typical_delta: float | None = None
    lenience: float = 2.0
    cascade_alpha: float = 0.0

    def __post_init__(self) -> None:
        for setting in all_settings():
            setting.check(getattr(self, setting.field))


def all_settings() -> list[Setting]:
    """Every rule's settings, in the registry's order."""
    return [setting for rule in RULES.values() for setting in rule.settings]


def make_rule(name: str, params: RuleParams | None = None) -> AcceptanceRule:
    """The rule called `name` with its settings from `params`."""
    if name not in RULES:
        raise ConfigError("rule", f"must be one of {', '.join(RULE_NAMES)} (got {name!r})")
    return RULES[name].from_params(params or RuleParams())
