"""The code base stays ruff-clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (ROOT / ".venv/bin/ruff").exists(), reason="ruff not installed"
)
def test_ruff_check() -> None:
    ruff = shutil.which("ruff") or str(ROOT / ".venv/bin/ruff")
    result = subprocess.run(
        [ruff, "check", "specplay", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout
