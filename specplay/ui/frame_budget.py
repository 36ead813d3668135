"""How often the screen may draw while lanes generate.

A frame costs tens of ms of Python on the UI thread. Where the lanes' models share this
machine's CPUs, that time is taken from them, and on a slow machine the lanes' tokens/s read low
(benchmarks/bench_tui.py measures the lanes under the UI against headless). So while lanes
generate, the UI thread may use at most `cpu_share` of a core: the screen updates less often on a
slow machine, never the lanes slower. It still moves at least every `max_interval_s`, and at
most `1 / max_hz` times a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable

UI_CPU_SHARE = 0.02
MAX_INTERVAL_S = 1.0
MAX_HZ = 10


class FrameBudget:
    def __init__(
        self,
        cpu_share: float = UI_CPU_SHARE,
        max_interval_s: float = MAX_INTERVAL_S,
        max_hz: float = MAX_HZ,
        wall: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        """`cpu` is the UI thread's own CPU time: ask on the UI thread."""
        self.cpu_share, self.max_interval_s, self.min_interval_s = cpu_share, max_interval_s, 1 / max_hz
        self._wall, self._cpu = wall, cpu
        self._drawn_wall, self._drawn_cpu = wall(), cpu()

    def wait_s(self) -> float:
        """Seconds until the next frame may be drawn; 0 when it may be now."""
        since = self._wall() - self._drawn_wall
        used = self._cpu() - self._drawn_cpu
        # The share recovers as wall time passes without UI work: at used / cpu_share since the last frame.
        allowed_at = max(self.min_interval_s, min(used / self.cpu_share, self.max_interval_s))
        return max(0.0, allowed_at - since)

    def drawn(self) -> None:
        """A frame was drawn (or a run starts): the budget counts from now."""
        self._drawn_wall, self._drawn_cpu = self._wall(), self._cpu()
