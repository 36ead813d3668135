"""The engine's random draws: one seeded stream of uniforms, read in blocks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 256
"""Uniforms numpy draws per call: one call per many rounds instead of one per round, whose cost
on the host stands between two model calls."""


class Draws:
    """Uniforms in [0, 1) from a generator seeded with `seed`, handed out in order.

    The values and their order are those of asking the generator for each batch when it is
    needed: its doubles are consecutive outputs of one stream, however they are grouped."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self._block: list[float] = []
        self._next = 0

    def take(self, n: int) -> list[float]:
        """The next n uniforms."""
        end = self._next + n
        if end > len(self._block):
            self._block = self._block[self._next :] + self._rng.random(max(n, BLOCK)).tolist()
            self._next, end = 0, n
        out = self._block[self._next : end]
        self._next = end
        return out

    def one(self) -> float:
        return self.take(1)[0]


@dataclass(frozen=True, slots=True)
class RoundDraws:
    """The uniforms of one speculative round of k drafted tokens, taken from the stream as 3k + 1
    in this order; every backend reads them by name."""

    draft: list[float]
    """k: drafted token i is drawn with draft[i] (unused at temperature 0)."""
    accept: list[float]
    """k: position i is kept iff accept[i] < the rule's acceptance probability."""
    residual: list[float]
    """k: the correction after a rejection at position i is drawn with residual[i]."""
    bonus: float
    """The bonus token after k accepted drafts."""

    @classmethod
    def take(cls, draws: Draws, k: int) -> RoundDraws:
        u = draws.take(3 * k + 1)
        return cls(draft=u[:k], accept=u[k : 2 * k], residual=u[2 * k : 3 * k], bonus=u[3 * k])
