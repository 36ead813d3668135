"""How the model thread hands events to the reading thread: a wakeup per event, as
runner/thread.py does it, against a batched hand-over that wakes a waiting reader at most once
per 50 ms (fewer wakeups to take a CPU from the BLAS threads). Measured both ways, the batched
one was no faster here, so the stream wakes its reader per event.

    python benchmarks/bench_event_stream.py                       # the demo models, both modes
    python benchmarks/bench_event_stream.py --modes target --pairs 21

Each pair runs the same greedy request through both, alternating which goes first, on one
model thread; tokens/s is the engine's own (counted where tokens are made, so the hand-over's
cost shows as the model thread slowing down, not as late arrivals). Prints each mode's paired
median of batched / per-event with its interquartile range.
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from collections import deque
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)
from specplay.backends.mlx import blas, load_mlx_backend, release_thread
from specplay.config.demo import demo_model_paths
from specplay.engine.controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.runner import thread as model_thread

END = model_thread._END  # the marker ModelThread.stream ends a stream with

PROMPT = 'import os\nimport sys\n\n\ndef parse_args(argv):\n    """Parse the command line arguments."""\n'


class BatchedStream:
    """The alternative: the producer wakes a waiting reader at most once per interval, and the
    reader takes whatever has arrived when it wakes (or when its wait times out)."""

    def __init__(self, wake_interval_s: float = 0.05) -> None:
        self._items: deque[tuple[Any, BaseException | None]] = deque()
        self._ready = threading.Condition()
        self._wake_interval_s = wake_interval_s
        self._woken_at = -math.inf

    def put(self, item: Any, error: BaseException | None = None) -> None:
        with self._ready:
            self._items.append((item, error))
            now = time.monotonic()
            if item is END or error is not None or now - self._woken_at >= self._wake_interval_s:
                self._woken_at = now
                self._ready.notify()

    def __iter__(self) -> BatchedStream:
        return self

    def __next__(self) -> Any:
        with self._ready:
            while not self._items:
                self._ready.wait(timeout=self._wake_interval_s)
            item, error = self._items[0]
            if item is not END:  # the end stays: the stream stays exhausted
                self._items.popleft()
        if error is not None:
            raise error
        if item is END:
            raise StopIteration
        return item


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="target,speculative")
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    if args.pairs < 2:
        parser.error("--pairs must be at least 2 (a spread needs two)")
    target, drafters = demo_model_paths()
    named = [(name, str(path)) for name, path in drafters.items()]
    settings = SpecSettings(k=args.k, route=named[0][0], sampling=SamplingParams(0.0))
    print(f"demo models, drafter {named[0][0]}, k={args.k}, greedy, {args.max_tokens} tokens; {blas.THREADS_CHOSEN}")
    thread = model_thread.ModelThread(on_exit=release_thread)
    engine = thread.call(lambda: SpecEngine(load_mlx_backend(str(target), named)))
    ids = tuple(engine.encode(PROMPT, raw=True))
    per_event = model_thread.EventStream
    kinds = {"per event": per_event, "batched": BatchedStream}
    try:
        for mode in args.modes.split(","):

            def run(stream: type, mode: str = mode) -> float:
                model_thread.EventStream = stream  # type: ignore[misc]  (what ModelThread.stream builds)
                request = Request(PROMPT, ids, mode, 0, args.max_tokens, ignore_eos=True)  # type: ignore[arg-type]
                events = list(thread.stream(lambda: engine.generate(request, LiveControls(settings, engine.drafters))))
                return float(events[-1].metrics["tokens_per_s"])

            for stream in kinds.values():  # warm-up
                run(stream)
            speeds: dict[str, list[float]] = {name: [] for name in kinds}
            ratios = []
            for pair in range(args.pairs):
                order = list(kinds) if pair % 2 == 0 else list(reversed(kinds))
                measured = {name: run(kinds[name]) for name in order}
                for name, value in measured.items():
                    speeds[name].append(value)
                ratios.append(measured["batched"] / measured["per event"])
            low, _, high = statistics.quantiles(ratios, n=4)
            print(
                f"{mode:<12} per event {statistics.median(speeds['per event']):7.1f} tokens/s   batched "
                f"{statistics.median(speeds['batched']):7.1f}   batched / per event {statistics.median(ratios):.3f}"
                f" (IQR {low:.3f}-{high:.3f}, {args.pairs} pairs)"
            )
    finally:
        model_thread.EventStream = per_event  # type: ignore[misc]
        thread.close()


if __name__ == "__main__":
    main()
