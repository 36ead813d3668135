"""Run a command and read its own peak memory.

`getrusage(RUSAGE_CHILDREN)` in the test process is no measure of one child: Linux counts the
parent's pages in a child's peak when the child is started by fork or vfork (before it runs its own
program), and the figure is the largest of every child the tests ever started. So the command is
started by a small launcher process, and the launcher reports its only child's peak."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

_LAUNCHER = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[2:], check=False)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
open(sys.argv[1], "w").write(str(peak_kib))
sys.exit(done.returncode)
"""


def run_with_peak_mib(argv: list[str], timeout_s: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run argv to its end; its result (text) and its peak resident memory in MiB. Past
    `timeout_s`, the launcher and the command are killed together and TimeoutExpired raised."""
    with tempfile.TemporaryDirectory() as folder:
        peak_file = Path(folder) / "peak_kib"
        command = [sys.executable, "-c", _LAUNCHER, str(peak_file), *argv]
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        ) as launched:
            try:
                out, err = launched.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(launched.pid, signal.SIGKILL)  # the command too, not the launcher alone
                launched.communicate()
                raise
        done = subprocess.CompletedProcess(command, launched.returncode, out, err)
        if not peak_file.exists():
            raise AssertionError(f"the launcher read no peak (exit {done.returncode}): {err[-2000:]}")
        return done, int(peak_file.read_text()) / 1024
