"""Keys typed while the playground starts wait for it: on a real pseudo-terminal, ctrl+r (which
the terminal's line editing would take as "reprint the line") and a key without enter are read
as typed, and the terminal is left as it was."""

from __future__ import annotations

import os
import select
import termios

from specplay.cli.early_keys import keys_kept


def _read(fd: int) -> bytes:
    ready, _, _ = select.select([fd], [], [], 1.0)
    return os.read(fd, 64) if ready else b""


def test_ctrl_r_typed_before_the_playground_reads_waits_for_it() -> None:
    main, terminal = os.openpty()
    try:
        before = termios.tcgetattr(terminal)
        os.write(main, b"\x12")  # line editing on: reprinted, never readable
        assert _read(terminal) == b"" and _read(main) == b"^R\r\n"  # the reprint
        with keys_kept(terminal):
            os.write(main, b"\x12x")
            assert _read(terminal) == b"\x12x"
            assert _read(main) == b""  # nothing echoed over the screen to come
        assert termios.tcgetattr(terminal) == before
    finally:
        os.close(main)
        os.close(terminal)


def test_not_a_terminal_is_left_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with open(tmp_path / "f", "w") as f, keys_kept(f.fileno()):
        pass
