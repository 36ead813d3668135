"""Acceptance math for speculative decoding, as small pure functions; the rules that relax it
are in rules.py.

Notation as in Leviathan et al. 2023: at one drafted position `p_target` is the target's
distribution, `p_draft` the drafter's, `x` the drafted token and `u` a uniform draw in [0, 1).
A draft token is accepted iff u < its acceptance probability, so every rule is exact.

Array functions take `xp`: numpy or mlx.core (the same formula runs in float64 in the tests and
on the accelerator in the MLX backend), or SCALARS, for one position's plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specplay.engine.rules import AcceptanceRule

Array = Any  # numpy.ndarray, mlx.core.array, or a float with SCALARS
_TINY = 1e-30  # keeps a division finite in float32 where the numerator is 0 anyway


class _Scalars:
    """`xp` for one position's plain floats: a formula written for rows runs unchanged on them."""

    @staticmethod
    def where(condition: bool, if_true: float, if_false: float) -> float:
        return if_true if condition else if_false

    minimum = staticmethod(min)
    maximum = staticmethod(max)
    exp = staticmethod(math.exp)


SCALARS = _Scalars()


def tv_distance(p_target: Array, p_draft: Array) -> Array:
    """d = TV(p_target, p_draft) = 1/2 * sum_x |p_target(x) - p_draft(x)|, over the last axis."""
    return 0.5 * abs(p_target - p_draft).sum(axis=-1)


def residual_distribution(p_target: Array, p_draft: Array, xp: Any) -> Array:
    """After a rejection the correction is drawn from norm(max(p_target - p_draft, 0)): the mass the
    target has where the drafter falls short. The mentored rule shares it, since
    pi - p_draft = (1 - theta) * (p_target - p_draft). With no such mass no rejection can happen;
    p_target is returned there so each row stays a distribution."""
    excess = xp.maximum(p_target - p_draft, 0.0)
    mass = excess.sum(axis=-1, keepdims=True)
    return xp.where(mass > 0, excess / xp.maximum(mass, _TINY), p_target)


def inverse_cdf_sample(probs: Array, uniforms: Array, xp: Any) -> Array:
    """One draw per row from the engine's uniforms: the first index whose cumulative mass reaches
    (1 - u) * total. 1 - u lies in (0, 1], so a token of zero probability is never drawn."""
    cdf = xp.cumsum(probs, axis=-1)
    threshold = (1.0 - uniforms)[..., None] * cdf[..., -1:]
    return (cdf < threshold).sum(axis=-1)


def greedy_accept(draft_token: int, target_argmax: int) -> bool:
    """Greedy (temperature 0): accept iff the draft token is the target's argmax; the correction
    is that argmax. Output is identical to greedy target-only decoding."""
    return draft_token == target_argmax


def lossless_acceptance(p_target: Array, p_draft: Array, xp: Any) -> Array:
    """Lossless rejection sampling (Leviathan et al. 2023, Chen et al. 2023): accept x ~ p_draft
    with probability min(1, p_target(x) / p_draft(x)). With the residual above, every emitted
    token is distributed exactly as p_target. A token the drafter gave no mass cannot have been
    drafted; the ratio's limit is used there so the function is total."""
    ratio = xp.minimum(1.0, p_target / xp.maximum(p_draft, _TINY))
    return xp.where(p_draft > 0, ratio, xp.where(p_target > 0, 1.0, 0.0))


def lossless_accept_probability(p_target_x: float, p_draft_x: float) -> float:
    """Lossless acceptance at one position."""
    return lossless_acceptance(p_target_x, p_draft_x, SCALARS)


def entropy(probs: Array, xp: Any) -> Array:
    """H(p_target) in nats; a token of zero probability adds nothing."""
    return -(probs * xp.log(xp.maximum(probs, _TINY))).sum(axis=-1)


def rule_output_distribution(p_draft: Array, acceptance: Array, residual: Array, xp: Any) -> Array:
    """Every rule keeps the lossless residual after a rejection, so its output at a position is
    exact: pi(y) = p_draft(y) a(y) + (1 - sum_x p_draft(x) a(x)) residual(y), a the rule's
    acceptance. TV(pi, p_target) is then the TV each rule spends there: one unit for all of them."""
    kept = p_draft * acceptance
    return kept + (1.0 - kept.sum(axis=-1, keepdims=True)) * residual


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's decision on one drafted position."""

    accepted: bool
    relaxed: bool
    """Accepted, but lossless acceptance would have rejected it under the same uniform draw."""
    theta: float
    """Mentored decoding's weight min(1, D / d); 0 under the other rules (no interpolation)."""
    probability: float | None
    """The rule's probability of keeping the token; None where greedy and lossless (an argmax match)."""


def judge(
    rule: AcceptanceRule,
    *,
    greedy: bool,
    token_id: int,
    target_argmax: int,
    p_target_x: float,
    p_draft_x: float,
    stats: Mapping[str, float],
    uniform: float,
) -> Verdict:
    """Greedy where nothing relaxes it (an argmax match), else u < the rule's probability."""
    theta = rule.theta(stats["tv"])
    if greedy and rule.lossless:
        return Verdict(accepted=greedy_accept(token_id, target_argmax), relaxed=False, theta=theta, probability=None)
    probability = rule.accept_probability(p_target_x, p_draft_x, stats)
    accepted = uniform < probability
    relaxed = accepted and uniform >= lossless_accept_probability(p_target_x, p_draft_x)
    return Verdict(accepted=accepted, relaxed=relaxed, theta=theta, probability=probability)
