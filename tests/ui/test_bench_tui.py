"""benchmarks/bench_tui.py takes every drafter kind and any model location, and prints a ratio per kind.

The ratios themselves are speed, which lives in the benchmark's own runs (README, Benchmarks); here
the bounds only catch a reading off by a whole factor (a lane clock that counts the wrong span)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^(\S+)\s+(model|prompt-lookup|early-exit)\s+([0-9.]+)\s+\(IQR ([0-9.]+)-([0-9.]+)\)$", re.M)


def bench_tui(*flags: str) -> dict[str, tuple[str, float]]:
    """The benchmark's summary rows: drafter name -> (kind, median TUI/headless ratio)."""
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_tui.py"), "--prompt", CODE_PROMPT, *flags]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return {name: (kind, float(median)) for name, kind, median, _, _ in ROW.findall(done.stdout)}


def test_a_row_per_drafter_kind_on_a_model_folder(tiny: TinyModels) -> None:
    drafters = [f"near={tiny.near}", "lookup=prompt-lookup", "exit=early-exit:layers=1"]
    flags = [flag for drafter in drafters for flag in ("--draft", drafter)]
    rows = bench_tui("--target", str(tiny.target), *flags, "--repeats", "2", "--max-tokens", "24")
    assert {name: kind for name, (kind, _) in rows.items()} == {
        "near": "model",
        "lookup": "prompt-lookup",
        "exit": "early-exit",
    }
    for name, (_, ratio) in rows.items():
        assert 0.3 < ratio < 3.0, f"{name}: TUI/headless {ratio}"


def test_a_gguf_target(smollm2: Path) -> None:
    rows = bench_tui("--target", str(smollm2), "--draft", "lookup=prompt-lookup", "--repeats", "1", "--max-tokens", "8")
    kind, ratio = rows["lookup"]
    assert kind == "prompt-lookup" and 0.3 < ratio < 3.0
