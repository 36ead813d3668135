"""Acceptance math for speculative decoding, as small pure functions.

Notation as in Leviathan et al. 2023: at one drafted position `p_target` is the target's
distribution, `p_draft` the drafter's, `x` the drafted token and `u` a uniform draw in [0, 1).
A draft token is accepted iff u < its acceptance probability, so the rules below are exact.

Array functions take `xp` (numpy or mlx.core): the same formula runs in float64 in the tests
and on the accelerator in the MLX backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's decision on one drafted position."""

    accepted: bool
    by_budget: bool
    """Accepted, but lossless acceptance would have rejected it under the same uniform draw."""
    theta: float


def judge(
    token: int,
    p_target_x: float,
    p_draft_x: float,
    tv: float,
    target_argmax: int,
    tv_budget: float,
    greedy: bool,
    uniform: float,
) -> Verdict:
    """Apply the rule the settings call for: greedy, lossless, or mentored with budget D."""
    theta = mentored_theta(tv, tv_budget)
    if greedy and tv_budget == 0:
        return Verdict(greedy_accept(token, target_argmax), False, theta)
    accepted = uniform < mentored_accept_probability(p_target_x, p_draft_x, theta)
    by_budget = accepted and uniform >= lossless_accept_probability(p_target_x, p_draft_x)
    return Verdict(accepted, by_budget, theta)
