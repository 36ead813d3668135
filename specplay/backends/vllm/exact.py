"""Exact corrections from server samples, as small pure functions.

After a rejection the correction must come from norm((p_target - p_draft)+). From the top-K alone
that residual is approximate (topk.py). Rejection sampling makes it exact: draw y ~ p_target on the
target's server and accept it with probability (1 - p_draft(y) / p_target(y))+. Each draw is then
accepted with probability sum_y (p_target(y) - p_draft(y))+ = TV, and an accepted y is distributed
as the residual whichever draw it was. Only two numbers per draw are needed: p_target(y), which the
server reports for every token it samples, and p_draft(y), which the drafter listed, or which is
bracketed and looked up only when the bracket leaves the decision open.

Requests are the cost and the engine reads only the first rejected position's correction, so the
generation hands the engine LazyCorrections: a position's draws happen when its correction is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from specplay.backends.vllm.topk import TopK
from specplay.engine.settings import SamplingParams

SAMPLE_CAP = 64
"""Draws for one correction at most; past them the top-K residual stands in, with its bound."""
CONFIDENCE = 0.99
"""A batch is sized to hold an accepted draw with this probability, judged at TV's lower bound."""
ACCEPT_STREAM = 0x5EC0
"""Second seed word of the acceptance RNG: a stream apart from any generator seeded by one int,
such as a server's (or the fake server's) per-sample generators seeded with the same number."""

Sample = tuple[int, float]
"""A token the target's server sampled, and p_target of it as the server reported it."""


# A probability a server reports is the one its sampling used when it reports processed logprobs,
# or when processing changes nothing: temperature 1 and no filters (raw = processed).
def reported_probs_exact(sampling: SamplingParams, raw: bool) -> bool:
    no_processing = sampling.temperature == 1.0 and sampling.top_p >= 1 and sampling.top_k == 0
    return not raw or (no_processing and sampling.min_p == 0)


# Accept y ~ p_target with probability (1 - p_draft(y) / p_target(y))+. With a uniform v in [0, 1):
# v < 1 - p_draft / p_target  <=>  p_draft(y) < (1 - v) * p_target(y); no division, and a token the
# target gave no mass is never accepted.
def accept_sample(p_target_y: float, p_draft_y: float, uniform: float) -> bool:
    return p_draft_y < (1.0 - uniform) * p_target_y


# With p_draft(y) known only to lie in [lo, hi], the decision above is already made when the whole
# bracket falls on one side of (1 - v) * p_target(y); otherwise it waits for the exact value.
def decide(p_target_y: float, p_draft_bracket: tuple[float, float], uniform: float) -> bool | None:
    lo, hi = p_draft_bracket
    if accept_sample(p_target_y, hi, uniform):
        return True
    if not accept_sample(p_target_y, lo, uniform):
        return False
    return None


# p_draft(y): exact when listed, else in [0, the most an unlisted token can have].
def p_draft_range(p_draft: TopK, token: int) -> tuple[float, float]:
    if token in p_draft.probs:
        return p_draft.probs[token], p_draft.probs[token]
    return 0.0, p_draft.unlisted_max


# n draws hold an accepted one with probability 1 - (1 - TV)^n. A batch is the least n reaching
# CONFIDENCE at TV's lower bound (one request usually settles it), within what the cap leaves.
def batch_size(tv_lower: float, remaining: int) -> int:
    if tv_lower >= 1:
        return 1
    if tv_lower <= 0:
        return max(1, remaining)
    wanted = math.ceil(math.log(1.0 - CONFIDENCE) / math.log(1.0 - tv_lower))
    return max(1, min(remaining, wanted))


# The top-K residual stands in only when all `cap` draws are refused, probability (1 - TV)^cap
# after a rejection, which itself has probability at most TV (lossless TV, mentored (1 - theta) TV).
# The position's error is then at most (1 - TV)^cap * B, B being the top-K residual's own bound
# (which already carries the rejection probability), and at most TV (1 - TV)^cap (the whole
# correction wrong). Over TV in [lo, hi]: min((1 - lo)^cap B, max t (1 - t)^cap), the maximum at
# t = 1 / (cap + 1) clipped into the bracket. For lo = 0.3 and cap 64 that is 1e-10 B.
def capped_bound(residual_bound: float, tv_lower: float, tv_upper: float, cap: int = SAMPLE_CAP) -> float:
    worst_t = min(max(1.0 / (cap + 1), tv_lower), tv_upper)
    return min((1.0 - tv_lower) ** cap * residual_bound, worst_t * (1.0 - worst_t) ** cap)


@dataclass(frozen=True, slots=True)
class ExactDraw:
    token: int | None
    """The accepted draw; None when the cap came first."""
    requested: int
    """Samples asked of the server (free ones not counted)."""
    batches: int
    """Sampling requests."""
    lookups: int
    """p_draft look-ups (one per batch at most)."""


def _first_accepted(
    batch: Sequence[Sample],
    uniforms: np.ndarray,
    p_draft_of: Callable[[int], tuple[float, float]],
    look_up: Callable[[Sequence[int]], Mapping[int, float]],
    known: dict[int, float],
) -> tuple[int | None, bool]:
    """(the batch's first accepted token, whether p_draft was looked up). Draws are judged in
    order; the open ones before the first sure accept are resolved in one look-up."""

    def bracket(token: int) -> tuple[float, float]:
        return (known[token], known[token]) if token in known else p_draft_of(token)

    verdicts = [decide(p_target_y, bracket(y), float(v)) for (y, p_target_y), v in zip(batch, uniforms, strict=True)]
    sure = next((j for j, verdict in enumerate(verdicts) if verdict is True), len(batch))
    open_tokens = sorted({batch[j][0] for j in range(sure) if verdicts[j] is None})
    if open_tokens:
        known.update(look_up(open_tokens))
    for j in range(min(sure + 1, len(batch))):
        token, p_target_y = batch[j]
        verdict = verdicts[j]
        if verdict is None:
            verdict = accept_sample(p_target_y, known[token], float(uniforms[j]))
        if verdict:
            return token, bool(open_tokens)
    return None, bool(open_tokens)


def rejection_draw(
    sample: Callable[[int, int], Sequence[Sample]],
    p_draft_of: Callable[[int], tuple[float, float]],
    look_up: Callable[[Sequence[int]], Mapping[int, float]],
    rng: np.random.Generator,
    tv_lower: float,
    cap: int = SAMPLE_CAP,
    free: Sequence[Sample] = (),
) -> ExactDraw:
    """One draw from norm((p_target - p_draft)+) by rejection from target samples.

    `sample(first, n)`: n fresh draws y ~ p_target with p_target(y) (`first` counts the samples
    asked for before, so each batch can take its own seeds). `p_draft_of(y)`: p_draft(y)'s bracket.
    `look_up(ys)`: exact p_draft of each y. `free`: draws already in hand (they count to the cap).
    One uniform from `rng` per draw, in order, whatever the decision needs."""
    known: dict[int, float] = {}
    drawn = requested = batches = lookups = 0
    batch = list(free[:cap])
    while drawn < cap:
        if not batch:
            n = batch_size(tv_lower, cap - drawn)
            batch = list(sample(requested, n))[:n]
            requested, batches = requested + n, batches + 1
            if not batch:
                break
        token, looked_up = _first_accepted(batch, rng.random(len(batch)), p_draft_of, look_up, known)
        lookups += looked_up
        if token is not None:
            return ExactDraw(token, requested, batches, lookups)
        drawn += len(batch)
        batch = []
    return ExactDraw(None, requested, batches, lookups)


class LazyCorrections(Sequence[int]):
    """Each position's correction, drawn the first time it is read: the engine reads only the
    first rejected position's, so only that one spends requests."""

    def __init__(self, draws: Sequence[Callable[[], int]]) -> None:
        self._draws = list(draws)
        self._drawn: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._draws)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = range(len(self))[index]  # negative indices and IndexError as a list has them
        if i not in self._drawn:
            self._drawn[i] = self._draws[i]()
        return self._drawn[i]

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(len(self)))

    @property
    def drawn(self) -> dict[int, int]:
        """The corrections drawn so far, by position."""
        return dict(self._drawn)
