"""Frames between turns: the screen draws while the models wait between two events, never during one.

Where the lanes' models share this machine's CPUs, a frame drawn while they compute takes its
CPU time (and the GIL) from them, and each lane's tokens/s, which should be its models' own,
reads several percent low (benchmarks/bench_tui.py). So the UI asks for a hold; the model thread,
at its next event boundary, where no lane's clock runs, hands the UI its turn and waits until the
frame is drawn. The frame then costs the run wall time, outside every lane's clock, and no
speed. It knows nothing of Textual or MLX.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MAX_HOLD_S = 1.0
"""A hold the UI never releases (a frame that failed) stops the models no longer than this."""


class TurnGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._on_held: Callable[[], None] | None = None
        self._holding = False
        self.held_s = 0.0
        """Seconds the models have waited for frames: the wall time drawing cost the runs."""

    def hold(self, on_held: Callable[[], None]) -> None:
        """UI thread: at the model thread's next event boundary, call `on_held` there and keep the
        models waiting until `release`. A later hold before then replaces this one."""
        with self._cond:
            self._on_held = on_held

    def release(self) -> None:
        """UI thread: the frame is drawn; the models go on (a hold not yet taken is dropped)."""
        with self._cond:
            self._on_held = None
            self._holding = False
            self._cond.notify_all()

    def between_turns(self) -> None:
        """Model thread, between two events: give the UI its turn if it asked for one."""
        if self._on_held is None:  # the common case, without the lock: a hold set now waits one event
            return
        with self._cond:
            on_held, self._on_held = self._on_held, None
            if on_held is None:
                return
            self._holding = True
            since = time.perf_counter()
            on_held()
            self._cond.wait_for(lambda: not self._holding, MAX_HOLD_S)
            self._holding = False
            self.held_s += time.perf_counter() - since
