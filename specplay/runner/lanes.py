"""Lanes side by side: several generations taking turns on the one model thread.

Each lane gets a clock that runs only during its own turns, so its tokens/s counts its own
compute and running lanes together does not distort the comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from specplay.engine.events import Event


class LaneClock:
    """Seconds of a lane's own work: stopped between its turns."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._busy_s = 0.0
        self._since: float | None = None

    def __call__(self) -> float:
        running = self._clock() - self._since if self._since is not None else 0.0
        return self._busy_s + running

    def resume(self) -> None:
        self._since = self._clock()

    def pause(self) -> None:
        if self._since is not None:
            self._busy_s += self._clock() - self._since
            self._since = None


def side_by_side(lanes: Mapping[str, tuple[LaneClock, Iterator[Event]]]) -> Iterator[tuple[str, Event]]:
    """Advance each lane by one event in turn until every lane is done; yields (lane, event)."""
    active = dict(lanes)
    while active:
        for name in list(active):
            clock, events = active[name]
            clock.resume()
            try:
                event = next(events)
            except StopIteration:
                del active[name]
                continue
            finally:
                clock.pause()
            yield name, event
