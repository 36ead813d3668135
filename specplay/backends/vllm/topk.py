"""Acceptance inputs when only the top-K of a distribution is known, as small pure functions.

A vLLM server returns, per position, the K most probable tokens with exact log-probabilities
(plus the actual or sampled token). The mass not listed, the tail, is then known exactly:
tail = 1 - sum(listed). Everything here works on that pair; a full distribution is the case
tail = 0. Each function states the bound it computes and why it holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from specplay.engine.settings import SamplingParams

LOGPROB_FLOOR = -9999.0  # vLLM's stand-in for -inf


@dataclass(frozen=True, slots=True)
class TopK:
    """Listed token probabilities and the exact mass of everything not listed."""

    probs: Mapping[int, float]
    tail: float
    ceiling: float | None = None
    """What any one unlisted token's probability is at most, when the listing says (a server's
    K-th largest listed value); None when it does not, and then only the tail bounds it."""

    @property
    def unlisted_max(self) -> float:
        """The most any one unlisted token can have."""
        return self.tail if self.ceiling is None else min(self.tail, self.ceiling)

    def argmax(self) -> int:
        return max(self.probs, key=lambda token: (self.probs[token], -token))


# A server lists its K most probable tokens and, besides them, the token it sampled (or the prompt's
# actual token, or tokens asked for by id), which can lie anywhere below. So an unlisted token is at
# most the K-th largest listed value, not the smallest: that may be an extra far down the tail.
def from_logprobs(logprobs: Mapping[int, float], top: int | None = None) -> TopK:
    """Listed log-probabilities (floored at -9999) to a TopK; the tail is what they leave. `top`:
    the K the server was asked for, which makes the ceiling on unlisted tokens known."""
    probs = {token: (0.0 if lp <= LOGPROB_FLOOR else math.exp(lp)) for token, lp in logprobs.items()}
    ranked = sorted(probs.values(), reverse=True)
    ceiling = ranked[top - 1] if top is not None and 0 < top <= len(ranked) else None
    return TopK(probs, max(0.0, 1.0 - sum(probs.values())), ceiling)


def _renormalised(probs: dict[int, float], tail: float, ceiling: float | None) -> TopK:
    total = sum(probs.values()) + tail
    if total <= 0:
        return TopK(probs, 0.0)
    return TopK(
        {token: p / total for token, p in probs.items()}, tail / total, None if ceiling is None else ceiling / total
    )


# Tempering raw probabilities, p_T ∝ p^(1/T): the listed part is A = Σ p^(1/T); the tail's part B
# is bounded, for T < 1 by c^(1/T - 1) · tail (each tail token is at most c = unlisted_max), for
# T > 1 by (V - K)^(1 - 1/T) · tail^(1/T) (Hölder). Z_T lies in [A, A + B]; the midpoint is used,
# so the result is approximate unless the tail is empty.
def temper(dist: TopK, temperature: float, vocab_size: int) -> tuple[TopK, bool]:
    """(tempered distribution, exact?)."""
    if temperature == 1.0 or not dist.probs:
        return dist, True
    inv = 1.0 / temperature
    powered = {token: p**inv for token, p in dist.probs.items()}
    if dist.tail <= 0:
        return _renormalised(powered, 0.0, None), True
    if temperature < 1:
        tail_bound = dist.unlisted_max ** (inv - 1.0) * dist.tail
    else:
        unlisted = max(1, vocab_size - len(dist.probs))
        tail_bound = unlisted ** (1.0 - inv) * dist.tail**inv
    ceiling = None if dist.ceiling is None else dist.ceiling**inv
    return _renormalised(powered, tail_bound / 2, ceiling), False


# The sampling filters (top-k, top-p, min-p) on listed tokens, as engine/sampling.py applies them
# to full rows. Every tail token is at most unlisted_max, so the tail is dropped exactly when the
# cut falls among listed tokens above that, and kept (approximately) otherwise.
def apply_filters(dist: TopK, sampling: SamplingParams) -> tuple[TopK, bool]:
    """(filtered distribution, exact?)."""
    if sampling.top_k == 0 and sampling.top_p >= 1 and sampling.min_p == 0:
        return dist, True
    probs, tail, exact, ceiling = dict(dist.probs), dist.tail, True, dist.unlisted_max
    if sampling.top_k > 0:
        ranked = sorted(probs, key=lambda token: -probs[token])
        kth = probs[ranked[sampling.top_k - 1]] if sampling.top_k <= len(ranked) else 0.0
        if sampling.top_k <= len(ranked):
            probs = {t: p for t, p in probs.items() if p >= kth}
        if kth > ceiling or tail <= 0:
            tail = 0.0
        else:
            exact = False
    if sampling.top_p < 1:
        total = sum(probs.values()) + tail
        kept = {t: p for t, p in probs.items() if sum(q for q in probs.values() if q > p) / total < sampling.top_p}
        # Unlisted tokens are cut for sure once the listed tokens above all of them reach top_p.
        if sum(p for p in probs.values() if p > ceiling) / total >= sampling.top_p or tail <= 0:
            tail = 0.0
        else:
            exact = False
        probs = kept
    if sampling.min_p > 0 and probs:
        threshold = sampling.min_p * max(probs.values())
        if ceiling < threshold or tail <= 0:
            tail = 0.0
        else:
            exact = False
        probs = {t: p for t, p in probs.items() if p >= threshold}
    return _renormalised(probs, tail, dist.ceiling if tail > 0 else None), exact


def processed(dist: TopK, sampling: SamplingParams, vocab_size: int, raw: bool) -> tuple[TopK, bool]:
    """The distribution sampling actually uses, from what a server listed: raw log-probabilities
    (before temperature and filters) are tempered and filtered here; processed ones are used as
    they came. Returns (distribution, exact?)."""
    if not raw:
        return dist, True
    tempered, exact_t = temper(dist, sampling.temperature, vocab_size)
    filtered, exact_f = apply_filters(tempered, sampling)
    return filtered, exact_t and exact_f


# TV(p_target, p_draft) = Σ_v (p_target(v) - p_draft(v))+ = Σ_v (p_draft(v) - p_target(v))+.
# Unknown entries (unlisted tokens) lie in [0, unlisted_max]. Lower end: each sum over its own
# listed tokens with the other side's unknowns at their upper bound. Upper end: unknowns at 0,
# plus the own tail (which can only add that much). Both sums are taken; max / min of them.
def tv_bracket(p_target: TopK, p_draft: TopK) -> tuple[float, float]:
    """[TV_lo, TV_hi]: the true TV distance lies in between."""
    target_up, draft_up = p_target.unlisted_max, p_draft.unlisted_max
    lo_target = sum(max(0.0, p - p_draft.probs.get(v, draft_up)) for v, p in p_target.probs.items())
    lo_draft = sum(max(0.0, q - p_target.probs.get(v, target_up)) for v, q in p_draft.probs.items())
    hi_target = sum(max(0.0, p - p_draft.probs.get(v, 0.0)) for v, p in p_target.probs.items()) + p_target.tail
    hi_draft = sum(max(0.0, q - p_target.probs.get(v, 0.0)) for v, q in p_draft.probs.items()) + p_draft.tail
    lo, hi = max(lo_target, lo_draft), min(hi_target, hi_draft, 1.0)
    return min(lo, hi), hi


# The correction after a rejection comes from norm((p_target - p_draft)+). Over the listed target
# tokens with unlisted draft entries taken as 0 this changes the emitted distribution at that
# position by at most tail(p_target) + min(tail(p_draft), |P \ Q| · unlisted_max of p_draft) in TV
# (§7: the 1/TV normaliser cancels, so the bound does not grow when TV is small).
def residual_error_bound(p_target: TopK, p_draft: TopK) -> float:
    outside = sum(1 for v in p_target.probs if v not in p_draft.probs)
    draft_unknown = min(p_draft.tail, outside * p_draft.unlisted_max)
    return min(1.0, p_target.tail + draft_unknown)


def residual(p_target: TopK, p_draft: TopK) -> dict[int, float]:
    """norm((p_target - p_draft)+) over the listed target tokens; p_target's listed part when
    that mass is zero (then no rejection can happen where both are fully known)."""
    excess = {v: max(0.0, p - p_draft.probs.get(v, 0.0)) for v, p in p_target.probs.items()}
    mass = sum(excess.values())
    if mass <= 0:
        excess, mass = dict(p_target.probs), sum(p_target.probs.values())
    return {v: e / mass for v, e in excess.items() if e > 0}


# One draw from listed probabilities with the engine's uniform u: the first token, in id order,
# whose cumulative mass reaches (1 - u) · total, as engine/accept.py's inverse_cdf_sample.
def inverse_cdf_draw(probs: Mapping[int, float], uniform: float) -> int:
    items = sorted((t, p) for t, p in probs.items() if p > 0)
    total = sum(p for _, p in items)
    threshold, cumulative = (1.0 - uniform) * total, 0.0
    for token, p in items:
        cumulative += p
        if cumulative >= threshold:
            return token
    return items[-1][0]
