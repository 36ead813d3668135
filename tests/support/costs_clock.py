"""A clock for `specplay costs`' tests: the scripted backend's simulated time, as a machine
under a changing load would report it."""

from __future__ import annotations

import random

from tests.support.scripted import SimulatedClock


class LoadedClock:
    """The scripted clock as a machine under a changing load sees it: each stretch of simulated
    time between two readings passes 1 to 1 + `jitter` times slower (drawn anew at each reading,
    seeded), and three times slower again from `slow_from_s` to `slow_until_s` of simulated time."""

    def __init__(
        self, clock: SimulatedClock, *, jitter: float = 0.0, slow_from_s: float = 0.0, slow_until_s: float = 0.0
    ) -> None:
        self.clock, self.jitter, self.slow = clock, jitter, (slow_from_s, slow_until_s)
        self.rng = random.Random(0)
        self.last_s = self.now_s = clock()

    def __call__(self) -> float:
        raw = self.clock()
        factor = 1 + self.jitter * self.rng.random()
        if self.slow[0] <= raw < self.slow[1]:
            factor *= 3  # a phase of the machine three times slower
        self.now_s += (raw - self.last_s) * factor
        self.last_s = raw
        return self.now_s
