"""Keys typed while the playground starts wait for it: on a real pseudo-terminal, ctrl+r (which
the terminal's line editing would take as "reprint the line") and a key without enter are read
as typed, and the terminal is left as it was."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import specplay.cli as cli
from specplay.cli import opens_playground
from specplay.cli.early_keys import keys_kept

REPO = Path(__file__).resolve().parents[2]


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


def test_the_command_line_imports_no_command_before_main_holds_the_keys() -> None:
    """What runs before `main` (the interpreter, `import specplay.cli`) is all a key typed while
    the playground starts can be lost to: the commands, numpy and the models' libraries load after."""
    probe = (
        "import sys, specplay.cli\n"
        "heavy = [m for m in sys.modules if m.startswith(('specplay.cli.', 'numpy', 'mlx', 'textual'))]\n"
        "print(sorted(m for m in heavy if m != 'specplay.cli.early_keys'))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "playground"),
    [
        ([], True),
        (["tui"], True),
        (["--target", "smollm2"], True),
        (["run", "--prompt", "x"], False),
        (["--help"], False),
        (["--version"], False),
    ],
)
def test_which_command_lines_open_the_playground(argv: list[str], playground: bool) -> None:
    assert opens_playground(argv) is playground


def test_main_holds_the_keys_while_the_commands_load(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    main_fd, terminal = os.openpty()
    seen: list[bool] = []
    real_build_parser = cli.build_parser

    def build_parser():  # type: ignore[no-untyped-def]
        seen.append(not termios.tcgetattr(terminal)[3] & termios.ICANON)
        return real_build_parser()

    try:
        before = termios.tcgetattr(terminal)
        monkeypatch.setattr(cli, "build_parser", build_parser)
        with os.fdopen(os.dup(terminal)) as stdin:
            monkeypatch.setattr(sys, "stdin", stdin)
            status = cli.main(["--target", str(tmp_path / "no-such-model")])
        assert status == 2  # the missing model, one line
        assert seen == [True]  # line editing was off while the commands loaded
        assert termios.tcgetattr(terminal) == before
    finally:
        os.close(main_fd)
        os.close(terminal)
