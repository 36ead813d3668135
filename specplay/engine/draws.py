"""The engine's random draws: one seeded stream of uniforms, read in blocks."""

from __future__ import annotations

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
