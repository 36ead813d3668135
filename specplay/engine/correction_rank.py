"""Width: where the target's token stood in the drafter's distribution when a drafted token was
rejected, and how often a second branch of a draft tree would have held it.

The rule, defined here once:
- At a rejected drafted position the round commits a correction y (drawn from the residual; at
  temperature 0 the target's argmax). Its rank is 1 + the number of tokens to which the drafter
  gave strictly more probability than to y, in the drafter's distribution at that position as
  the round drew from it (temperature, top-k and top-p applied; at temperature 0, where drafting
  takes the argmax, its softmax, read from its logits: they order tokens alike, without
  computing an exponential over the vocabulary). Tied tokens share their best rank.
- Only the drafter's top RANK_TOP_N count: a rank above it, or a y the drafter gave no
  probability, is recorded as RANK_TOP_N + 1 ("other"). None: the drafter's distribution is not
  known (prompt lookup, a server that lists too few tokens).
- A second branch would have saved the rejection iff the rank is at most SECOND_BRANCH_RANK: a
  draft tree whose branches at that position are the drafter's two most likely tokens would have
  held y. Under greedy drafting the drafted token is the drafter's top, so that is rank 2 exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from specplay.engine.accept import Array

RANK_TOP_N = 4
"""How many of the drafter's most likely tokens a rank is counted among."""
OTHER_RANK = RANK_TOP_N + 1
"""The rank recorded for a token outside the drafter's top RANK_TOP_N."""
SECOND_BRANCH_RANK = 2
"""A tree with the drafter's top two tokens at a position holds any token of rank 1 or 2."""
OTHER = "other"
"""The histogram's key for ranks outside the top RANK_TOP_N."""
LOGITS = -math.inf
"""The `floor` of logits: a token at -inf has no probability."""


def correction_ranks(scores: Array, tokens: Array, xp: Any, floor: float = 0.0) -> Array:
    """scores [k, vocab], tokens [k] -> each token's rank in its row by the rule above, capped at
    OTHER_RANK; `xp` is numpy or mlx.core. `scores` are probabilities (a token at `floor`, 0, has
    none) or logits (floor LOGITS)."""
    p_y = xp.take_along_axis(scores, tokens[:, None], axis=-1)
    above = (scores > p_y).sum(axis=-1)
    return xp.where(p_y[:, 0] > floor, xp.minimum(above + 1, OTHER_RANK), OTHER_RANK)


def listed_rank(listed: dict[int, float], token: int, listed_at_least: int) -> int | None:
    """The rank of `token` when only a distribution's most likely `listed_at_least` tokens are known
    (`listed`, token -> p, may hold more, such as the drafted token). A listed token ranks by the
    rule above (every more likely token is listed too); an unlisted one lies past the listing, so
    it is OTHER_RANK when the listing covers the top RANK_TOP_N, else unknown."""
    if token in listed:
        row = np.array([list(listed.values())], dtype=np.float64)
        return int(correction_ranks(row, np.array([list(listed).index(token)]), np)[0])
    return OTHER_RANK if listed_at_least >= RANK_TOP_N else None


def rank_key(rank: int) -> str:
    """The histogram's key for a rank: "1" .. str(RANK_TOP_N), or OTHER (also for a rank below 1,
    which only a damaged session file can hold)."""
    return str(rank) if 1 <= rank <= RANK_TOP_N else OTHER


def empty_histogram() -> dict[str, int]:
    return {rank_key(rank): 0 for rank in range(1, OTHER_RANK + 1)}


def second_branch_saves(key: str) -> bool:
    """Whether the rejections under a histogram key are ones a second branch would have saved."""
    return key != OTHER and int(key) <= SECOND_BRANCH_RANK


def second_branch_share(histogram: dict[str, int]) -> float | None:
    """The share of ranked rejections a second branch would have saved (None: none ranked)."""
    total = sum(histogram.values())
    saved = sum(count for key, count in histogram.items() if second_branch_saves(key))
    return saved / total if total else None


def histogram_of(ranks: Iterable[int | None]) -> dict[str, int]:
    """Ranks of rejections (None: unknown, not counted) as the metrics' histogram."""
    out = empty_histogram()
    for rank in ranks:
        if rank is not None:
            out[rank_key(rank)] += 1
    return out
