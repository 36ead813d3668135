"""Acceptance math for speculative decoding, as small pure functions.

Notation as in Leviathan et al. 2023: at one drafted position `p_target` is the target's
distribution, `p_draft` the drafter's, `x` the drafted token and `u` a uniform draw in [0, 1).
A draft token is accepted iff u < its acceptance probability, so the rules below are exact.

Array functions take `xp` (numpy or mlx.core): the same formula runs in float64 in the tests
and on the accelerator in the MLX backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specplay.engine.settings import AcceptanceRule

Array = Any  # numpy.ndarray or mlx.core.array
_TINY = 1e-30  # keeps a division finite in float32 where the numerator is 0 anyway


# d = TV(p_target, p_draft) = 1/2 * sum_x |p_target(x) - p_draft(x)|, over the last axis.
def tv_distance(p_target: Array, p_draft: Array) -> Array:
    return 0.5 * abs(p_target - p_draft).sum(axis=-1)


# After a rejection the correction is drawn from norm(max(p_target - p_draft, 0)): the mass the
# target has where the drafter falls short. The mentored rule shares it, since
# pi - p_draft = (1 - theta) * (p_target - p_draft). With no such mass no rejection can happen;
# p_target is returned there so each row stays a distribution.
def residual_distribution(p_target: Array, p_draft: Array, xp: Any) -> Array:
    excess = xp.maximum(p_target - p_draft, 0.0)
    mass = excess.sum(axis=-1, keepdims=True)
    return xp.where(mass > 0, excess / xp.maximum(mass, _TINY), p_target)


# pi = (1 - theta) * p_target + theta * p_draft: the target moved theta of the way to the drafter.
def mentored_distribution(p_target: Array, p_draft: Array, theta: float) -> Array:
    return (1.0 - theta) * p_target + theta * p_draft


# One draw per row from the engine's uniforms: the first index whose cumulative mass reaches
# (1 - u) * total. 1 - u lies in (0, 1], so a token of zero probability is never drawn.
def inverse_cdf_sample(probs: Array, uniforms: Array, xp: Any) -> Array:
    cdf = xp.cumsum(probs, axis=-1)
    threshold = (1.0 - uniforms)[..., None] * cdf[..., -1:]
    return (cdf < threshold).sum(axis=-1)


# Greedy (temperature 0): accept iff the draft token is the target's argmax; the correction is
# that argmax. Output is identical to greedy target-only decoding.
def greedy_accept(draft_token: int, target_argmax: int) -> bool:
    return draft_token == target_argmax


# Lossless rejection sampling (Leviathan et al. 2023, Chen et al. 2023): accept x ~ p_draft with
# probability min(1, p_target(x) / p_draft(x)). With the residual above, every emitted token is
# distributed exactly as p_target. A token the drafter gave no mass cannot have been drafted; the
# ratio's limit is used so the function is total.
def lossless_accept_probability(p_target_x: float, p_draft_x: float) -> float:
    if p_draft_x <= 0:
        return 1.0 if p_target_x > 0 else 0.0
    return min(1.0, p_target_x / p_draft_x)


# Mentored decoding with TV budget D: theta = min(1, D / d), and theta = 1 when d = 0. Then
# TV(pi, p_target) = theta * d = min(d, D): the output moves at most D from the target, as far
# toward the drafter as the budget allows. D = 0 gives theta = 0 (pi = p_target) wherever d > 0.
def mentored_theta(tv: float, tv_budget: float) -> float:
    if tv <= 0:
        return 1.0
    return min(1.0, tv_budget / tv)


# Mentored acceptance: accept x ~ p_draft with probability min(1, pi(x) / p_draft(x)); the
# acceptance rate becomes 1 - max(0, d - D) instead of lossless 1 - d. At temperature 0 both
# distributions are one-hot, so a mismatching draft token (d = 1) is accepted with probability D.
def mentored_accept_probability(p_target_x: float, p_draft_x: float, theta: float) -> float:
    pi_x = (1.0 - theta) * p_target_x + theta * p_draft_x
    return lossless_accept_probability(pi_x, p_draft_x)


# Lossless acceptance over whole rows (or scalars): min(1, p_target / p_draft), elementwise, with
# the limit above where p_draft = 0. The relaxed rules below start from it.
def lossless_acceptance(p_target: Array, p_draft: Array, xp: Any) -> Array:
    ratio = xp.minimum(1.0, p_target / xp.maximum(p_draft, _TINY))
    return xp.where(p_draft > 0, ratio, xp.where(p_target > 0, 1.0, 0.0))


# Mentored acceptance over rows: lossless acceptance of pi = (1 - theta) p_target + theta p_draft.
def mentored_acceptance(p_target: Array, p_draft: Array, theta: Array, xp: Any) -> Array:
    return lossless_acceptance(mentored_distribution(p_target, p_draft, theta), p_draft, xp)


# H(p_target) in nats; a token of zero probability adds nothing.
def entropy(probs: Array, xp: Any) -> Array:
    return -(probs * xp.log(xp.maximum(probs, _TINY))).sum(axis=-1)


# Typical acceptance (Medusa, Cai et al. 2024) judges by the target alone: x is typical when
# p_target(x) > min(epsilon, delta * exp(-H(p_target))). The threshold falls where the target is
# unsure. It adds nothing only where the threshold is at least 1: epsilon >= 1 and
# delta * exp(-H) >= 1 (H <= ln vocabulary, so delta >= the vocabulary size is enough).
def typical_threshold(entropy_nats: Array, epsilon: float, delta: float, xp: Any) -> Array:
    return xp.minimum(epsilon, delta * xp.exp(-entropy_nats))


# Relaxed by typicality: accept what lossless acceptance accepts under the same u, and every
# typical token.
def typical_acceptance(p_target: Array, p_draft: Array, threshold: Array, xp: Any) -> Array:
    return xp.where(p_target > threshold, 1.0, lossless_acceptance(p_target, p_draft, xp))


# Lenience (DistillSpec, Zhou et al. 2024; Leviathan et al. 2023, appendix): accept with
# min(1, lambda * p_target(x) / p_draft(x)), lambda >= 1; lambda = 1 is lossless.
def lenience_acceptance(p_target: Array, p_draft: Array, lenience: float, xp: Any) -> Array:
    return lossless_acceptance(lenience * p_target, p_draft, xp)


# Speculative cascades (Narasimhan et al. 2024) with the Diff deferral rule: where the drafter is
# about as sure as the target, max p_draft >= max p_target - alpha, the output follows the drafter
# (its token is kept); elsewhere it defers to the target (lossless). alpha = -1 never trusts the
# drafter (lossless); alpha = 1 always does.
def cascade_trusts_drafter(max_p_target: Array, max_p_draft: Array, alpha: float) -> Array:
    return max_p_draft >= max_p_target - alpha


def cascade_acceptance(p_target: Array, p_draft: Array, trusted: Array, xp: Any) -> Array:
    return xp.where(trusted, 1.0, lossless_acceptance(p_target, p_draft, xp))


# Every rule above keeps the lossless residual after a rejection, so its output at a position is
# exact: pi(y) = p_draft(y) a(y) + (1 - sum_x p_draft(x) a(x)) residual(y), a the rule's
# acceptance. TV(pi, p_target) is then the TV each rule spends there: one unit for all of them.
def rule_output_distribution(p_draft: Array, acceptance: Array, residual: Array, xp: Any) -> Array:
    kept = p_draft * acceptance
    return kept + (1.0 - kept.sum(axis=-1, keepdims=True)) * residual


def rule_acceptance_rows(rule: AcceptanceRule, p_target: Array, p_draft: Array, xp: Any) -> Array:
    """a(y) for every token of each row [positions, vocab] under `rule`, its statistics (d, H, the
    maxima) taken from the rows themselves: what a backend holding full distributions computes."""
    params = rule.params
    if rule.name == "mentored":
        tv = tv_distance(p_target, p_draft)[..., None]
        theta = xp.where(tv > 0, xp.minimum(1.0, rule.tv_budget / xp.maximum(tv, _TINY)), 1.0)
        return mentored_acceptance(p_target, p_draft, theta, xp)
    if rule.name == "typical":
        threshold = typical_threshold(entropy(p_target, xp)[..., None], params.typical_epsilon, params.delta, xp)
        return typical_acceptance(p_target, p_draft, threshold, xp)
    if rule.name == "lenience":
        return lenience_acceptance(p_target, p_draft, params.lenience, xp)
    trusted = cascade_trusts_drafter(
        p_target.max(axis=-1, keepdims=True), p_draft.max(axis=-1, keepdims=True), params.cascade_alpha
    )
    return cascade_acceptance(p_target, p_draft, trusted, xp)


def rule_tv_spent(rule: AcceptanceRule, p_target: Array, p_draft: Array, xp: Any) -> Array:
    """TV(pi, p_target) at each row: how far the rule moves that position's output from the target."""
    acceptance = rule_acceptance_rows(rule, p_target, p_draft, xp)
    residual = residual_distribution(p_target, p_draft, xp)
    return tv_distance(rule_output_distribution(p_draft, acceptance, residual, xp), p_target)


@dataclass(frozen=True, slots=True)
class PositionStats:
    """What the rules read at one drafted position x beyond its two probabilities."""

    tv: float
    """d = TV(p_target, p_draft) (mentored decoding)."""
    entropy: float | None = None
    """H(p_target) in nats (typical acceptance)."""
    max_p_target: float | None = None
    """The largest probability of p_target (speculative cascades)."""
    max_p_draft: float | None = None


def accept_probability(rule: AcceptanceRule, p_target_x: float, p_draft_x: float, stats: PositionStats) -> float:
    """The rule's probability of accepting the drafted token x: one position, as the engine judges it."""
    params = rule.params
    if rule.lossless:  # a knob at its lossless end reads nothing else (and no backend sent it)
        return lossless_accept_probability(p_target_x, p_draft_x)
    if rule.name == "mentored":
        return mentored_accept_probability(p_target_x, p_draft_x, mentored_theta(stats.tv, rule.tv_budget))
    if rule.name == "lenience":
        return lossless_accept_probability(params.lenience * p_target_x, p_draft_x)
    if rule.name == "typical":
        assert stats.entropy is not None, "typical acceptance needs H(p_target)"
        threshold = min(params.typical_epsilon, params.delta * math.exp(-stats.entropy))
        return 1.0 if p_target_x > threshold else lossless_accept_probability(p_target_x, p_draft_x)
    assert stats.max_p_target is not None and stats.max_p_draft is not None, "cascades need both maxima"
    trusted = cascade_trusts_drafter(stats.max_p_target, stats.max_p_draft, params.cascade_alpha)
    return 1.0 if trusted else lossless_accept_probability(p_target_x, p_draft_x)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's decision on one drafted position."""

    accepted: bool
    by_budget: bool
    """Accepted, but lossless acceptance would have rejected it under the same uniform draw."""
    theta: float
    """Mentored decoding's weight min(1, D / d); 0 under the other rules (no interpolation)."""
    probability: float | None
    """The rule's probability of keeping the token; None where greedy and lossless (an argmax match)."""


def judge(
    token: int,
    p_target_x: float,
    p_draft_x: float,
    stats: PositionStats,
    target_argmax: int,
    rule: AcceptanceRule,
    greedy: bool,
    uniform: float,
) -> Verdict:
    """Apply the rule the settings call for: greedy where nothing relaxes it, else its probability."""
    theta = mentored_theta(stats.tv, rule.tv_budget) if rule.name == "mentored" else 0.0
    if greedy and rule.lossless:
        return Verdict(greedy_accept(token, target_argmax), False, theta, None)
    probability = accept_probability(rule, p_target_x, p_draft_x, stats)
    accepted = uniform < probability
    by_budget = accepted and uniform >= lossless_accept_probability(p_target_x, p_draft_x)
    return Verdict(accepted, by_budget, theta, probability)
