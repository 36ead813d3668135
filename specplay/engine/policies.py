"""Draft-length policies: how many tokens the drafter proposes next round.

`fixed`, `acceptance-rate` and `accepted-length` follow mini-vllm-rs's controllers;
`confidence` stops a draft early, SpecDec++-style, from the drafter's own probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from specplay.engine.settings import PolicyName, PolicyParams


class DraftLengthPolicy(Protocol):
    def propose(self) -> int:
        """The most tokens to draft next round."""
        ...

    def keep_drafting(self, confidences: Sequence[float]) -> bool:
        """Called after each drafted token when `stops_early`; False ends the draft."""
        ...

    def update(self, num_drafted: int, num_accepted: int) -> None:
        """Learn from the round the verifier just judged."""
        ...

    @property
    def stops_early(self) -> bool: ...


def _clamp(k: int, params: PolicyParams) -> int:
    return max(params.k_min, min(params.k_max, k))


class Fixed:
    stops_early = False

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.k = k

    def propose(self) -> int:
        return self.k

    def keep_drafting(self, confidences: Sequence[float]) -> bool:
        return True

    def update(self, num_drafted: int, num_accepted: int) -> None:
        pass


class AcceptanceRate(Fixed):
    """k +- 1 when the last round's accepted/proposed leaves [low, high]; boundaries keep k."""

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.params = params
        self.k = _clamp(k, params)

    def update(self, num_drafted: int, num_accepted: int) -> None:
        if num_drafted == 0:
            return
        rate = num_accepted / num_drafted
        if rate < self.params.low_acceptance:
            self.k = _clamp(self.k - 1, self.params)
        elif rate > self.params.high_acceptance:
            self.k = _clamp(self.k + 1, self.params)


class AcceptedLength(Fixed):
    """EMA s <- a * accepted + (1 - a) * s from s0 = k - 1; k = clamp(round(s) + 1).

    The + 1 probes one token past the recently accepted prefix. Rounding is half away from zero.
    """

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.params = params
        self.ema = float(k - 1)
        self.k = _clamp(k, params)

    def update(self, num_drafted: int, num_accepted: int) -> None:
        if num_drafted == 0:
            return
        alpha = self.params.ema_alpha
        self.ema = alpha * num_accepted + (1 - alpha) * self.ema
        self.k = _clamp(math.floor(self.ema + 0.5) + 1, self.params)


class Confidence(Fixed):
    """Draft up to k, at least k_min, and stop once the estimated chance that some drafted token
    is rejected, 1 - prod(c_j), exceeds the threshold. c_j is the drafter's probability of its
    own token: a stand-in for SpecDec++'s trained acceptance head."""

    stops_early = True

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.params = params
        self.k = max(k, params.k_min)

    def keep_drafting(self, confidences: Sequence[float]) -> bool:
        if len(confidences) < self.params.k_min:
            return True
        return 1.0 - math.prod(confidences) <= self.params.confidence_threshold


def make_policy(name: PolicyName, k: int, params: PolicyParams) -> DraftLengthPolicy:
    classes: dict[str, type[Fixed]] = {
        "fixed": Fixed,
        "acceptance-rate": AcceptanceRate,
        "accepted-length": AcceptedLength,
        "confidence": Confidence,
    }
    return classes[name](k, params)
