"""The one long-lived thread that owns the models.

MLX binds streams and random state to the thread that made them, so loading, caches and every
round run on this thread; other threads submit work and read results. It knows nothing of MLX.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


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

    def close(self, wait_s: float | None = None) -> None:
        """End the thread after its queued jobs; wait for it at most `wait_s` (None: until it ends).
        A job stuck on a server's reply is left behind with a bound: the thread is a daemon."""
        if not self._closing:
            self._closing = True
            self._jobs.put(None)
        self._thread.join(wait_s)
