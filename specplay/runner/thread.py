"""The one long-lived thread that owns the models.

MLX binds streams and random state to the thread that made them, so loading, caches and every
round run on this thread; other threads submit work and read results. It knows nothing of MLX.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
_END = object()
WAKE_INTERVAL_S = 0.05
"""How often a reader waiting on the model thread's items is woken at most: 20 times a second
is live enough for text appearing on a terminal."""


class EventStream:
    """Items of a generator running on the model thread, read from another thread.

    The producer wakes a waiting reader at most once per `wake_interval_s`, and the reader takes
    whatever has arrived when it wakes (items not announced are taken within the interval). A
    wakeup takes a CPU from the model's BLAS threads: on 2 CPUs, one per token cost target-only
    generation about 15% (benchmarks/bench_vs_mlx_lm.py --processes). The stream's end and
    errors are announced at once.

    An exception raised while waiting (Ctrl-C) leaves the stream readable: the caller can ask
    the generator to stop and keep reading until it ends.
    """

    def __init__(self, wake_interval_s: float = WAKE_INTERVAL_S) -> None:
        self._items: deque[tuple[Any, BaseException | None]] = deque()
        self._ready = threading.Condition()
        self._wake_interval_s = wake_interval_s
        self._woken_at = -math.inf

    def put(self, item: Any, error: BaseException | None = None) -> None:
        with self._ready:
            self._items.append((item, error))
            now = time.monotonic()
            if item is _END or error is not None or now - self._woken_at >= self._wake_interval_s:
                self._woken_at = now
                self._ready.notify()

    def end(self) -> None:
        """No more items: the reader stops after the ones already put."""
        self.put(_END)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        with self._ready:
            while not self._items:
                # The timeout takes items put without a wakeup, and keeps Ctrl-C responsive.
                self._ready.wait(timeout=self._wake_interval_s)
            item, error = self._items[0]
            if item is not _END:  # the end stays: the stream stays exhausted
                self._items.popleft()
        if error is not None:
            raise error
        if item is _END:
            raise StopIteration
        return item


class ModelThread:
    def __init__(self, name: str = "specplay-models", on_exit: Callable[[], None] | None = None) -> None:
        """`on_exit` runs on the thread as it ends, to release what the thread owns."""
        self._on_exit = on_exit
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
        if self._on_exit is not None:
            self._on_exit()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()

        def job() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self._jobs.put(job)
        return future

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the model thread and return its result (or raise its exception) here."""
        return self.submit(fn).result()

    def stream(self, make_items: Callable[[], Iterator[T]]) -> EventStream:
        """Run the generator `make_items()` on the model thread; read its items from the stream."""
        stream = EventStream()

        def job() -> None:
            try:
                for item in make_items():
                    stream.put(item)
                stream.end()
            except BaseException as exc:
                stream.put(None, exc)

        self._jobs.put(job)
        return stream

    def close(self, wait_s: float | None = None) -> None:
        """End the thread after its queued jobs; wait for it at most `wait_s` (None: until it ends).
        A job stuck on a server's reply is left behind with a bound: the thread is a daemon."""
        if not self._closing:
            self._closing = True
            self._jobs.put(None)
        self._thread.join(wait_s)
