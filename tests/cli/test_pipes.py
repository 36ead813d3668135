"""Output piped into a reader that stops early (`| head -c 10`) or into `/dev/stdout`: real
processes, real pipes. A closed pipe ends the command quietly with 141, as SIGPIPE ends `cat`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

REPO = Path(__file__).resolve().parents[2]
PIPE_CLOSED = 141


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """A sessions folder of two finished sessions."""
    folder = tmp_path / "sessions"
    for _ in range(2):
        write_session(folder, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    return folder


def _environ() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": ""}


def _specplay(*args: str) -> list[str]:
    return [sys.executable, "-m", "specplay", *args]


def _into_closed_pipe(args: list[str], cwd: Path) -> tuple[int, str]:
    """Runs `args` with stdout a pipe whose reader is gone before the first byte: every write meets
    a closed pipe, as when `head -c 10` has read its 10 bytes and left. Its exit status and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            _specplay(*args), stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=cwd, env=_environ()
        )
    finally:
        os.close(write)
    return result.returncode, result.stderr


def _listing(sessions: Path) -> list[list[str]]:
    first = sorted(sessions.iterdir())[0]
    return [
        ["sessions", "--sessions-dir", str(sessions)],
        ["sessions", "--json", "--sessions-dir", str(sessions)],
        ["export", str(first)],
        ["export", str(first), "-o", "/dev/stdout"],
        ["export", str(first), "-o", "-"],
        ["export", str(first), "--format", "jsonl"],
        ["--help"],
        ["run", "--help"],
    ]


def test_a_reader_that_left_ends_every_command_quietly(sessions: Path, tmp_path: Path) -> None:
    for args in _listing(sessions):
        code, err = _into_closed_pipe(args, tmp_path)
        assert (code, err) == (PIPE_CLOSED, ""), args


def test_run_into_a_reader_that_left(tmp_path: Path) -> None:
    for flags in (["--json"], []):
        args = ["run", "--target", "demo", "--prompt", "def f(x):", "--max-tokens", "8", *flags]
        code, err = _into_closed_pipe(args, tmp_path)
        assert (code, err) == (PIPE_CLOSED, ""), flags


def test_head_reads_its_ten_bytes_and_nothing_is_said(sessions: Path, tmp_path: Path) -> None:
    for args in _listing(sessions):
        command = " ".join(map(_quoted, _specplay(*args))) + " | head -c 10"
        result = subprocess.run(
            ["sh", "-c", command], capture_output=True, timeout=120, cwd=tmp_path, env=_environ(), check=False
        )
        assert len(result.stdout) == 10 and result.stderr == b"", (args, result.stderr)


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _export(args: list[str], cwd: Path, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        _specplay("export", *args), stdout=stdout, stderr=subprocess.PIPE, timeout=120, cwd=cwd, env=_environ()
    )


def test_dev_stdout_and_dash_are_the_pipe_itself(sessions: Path, tmp_path: Path) -> None:
    session = str(sorted(sessions.iterdir())[0])
    plain = _export([session], tmp_path)
    assert plain.returncode == 0 and b"## Texts" in plain.stdout
    for output in ("/dev/stdout", "-"):
        piped = _export([session, "-o", output], tmp_path)  # `| wc -c`: stdout is a pipe
        assert (piped.returncode, piped.stderr, piped.stdout) == (0, b"", plain.stdout), output
    assert not (tmp_path / "-").exists()  # `-` is stdout, not a file of that name
    html = _export([session, "-o", "-", "--format", "html"], tmp_path)
    assert html.returncode == 0 and html.stdout.lstrip().lower().startswith(b"<!doctype html>")


def test_dev_stdout_into_a_file_appends_and_loses_nothing(sessions: Path, tmp_path: Path) -> None:
    """`>> log.md` with `-o /dev/stdout`: the export goes where stdout goes, after what was there;
    the file is never replaced."""
    session = str(sorted(sessions.iterdir())[0])
    log = tmp_path / "log.md"
    log.write_bytes(b"kept\n")
    with log.open("ab") as appended:
        result = _export([session, "-o", "/dev/stdout"], tmp_path, stdout=appended.fileno())
    assert result.returncode == 0, result.stderr
    plain = _export([session], tmp_path).stdout
    assert log.read_bytes() == b"kept\n" + plain
