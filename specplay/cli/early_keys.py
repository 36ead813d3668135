"""Keys typed while the playground starts wait for it, rather than being lost to the terminal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO


@contextmanager
def keys_kept(stream: IO[str] | int) -> Iterator[None]:
    """From here until the playground reads terminal `stream` (or file descriptor), what is typed
    waits for it as keys: the terminal's line editing (where ctrl+r reprints the line, and a line
    waits for enter) and its echo are off, as the playground itself sets them; the terminal is
    left as it was after."""
    try:
        import termios  # POSIX only
    except ImportError:
        yield
        return
    try:
        fd = stream if isinstance(stream, int) else stream.fileno()
        before = termios.tcgetattr(fd)
    except (termios.error, OSError, ValueError):  # not a terminal (or no file at all): nothing waits
        yield
        return
    held = termios.tcgetattr(fd)
    held[3] &= ~(termios.ICANON | termios.ECHO | termios.IEXTEN)
    held[6][termios.VMIN], held[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, held)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)
