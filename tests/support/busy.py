"""Another process keeping a CPU busy, for what specplay does on a loaded machine."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_cpu() -> Iterator[None]:
    """Another process spinning on a CPU for the block."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let it start
        yield
    finally:
        spinner.kill()
        spinner.wait()
