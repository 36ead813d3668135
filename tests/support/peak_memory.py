"""Run a command and read its own peak memory.

`getrusage(RUSAGE_CHILDREN)` in the test process is no measure of one child: Linux counts the
parent's pages in a child's peak when the child is started by fork or vfork (before it runs its own
program), and the figure is the largest of every child the tests ever started. So the command is
started by a small launcher process, and the launcher reports its only child's peak."""

from __future__ import annotations

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
    """Run argv to its end; its result (text) and its peak resident memory in MiB."""
    with tempfile.TemporaryDirectory() as folder:
        peak_file = Path(folder) / "peak_kib"
        done = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, str(peak_file), *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        return done, int(peak_file.read_text()) / 1024
