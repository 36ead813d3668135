"""A SIGTERM (a scheduler's stop, `kill`) taken as Ctrl-C is: the command's own clean-up runs
(a bench reports what it measured, a fetch ends pip and removes its download), where Python's
default would end the process on the spot and leave a child process and its files behind."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """Within it, SIGTERM raises KeyboardInterrupt. Only the main thread can take a signal
    handler: elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
