"""One workload everywhere: bench encodes its prompts as `run` and the playground do (the chat
template, `--raw` to opt out) and says which; a long bench shows progress where stderr is a pipe,
and one stopped part-way leaves the report of what it measured."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from specplay.backends.mlx import blas
from specplay.bench.execute import BenchPlan, execute
from specplay.bench.sweep import BenchConfig
from specplay.data.library import Prompt
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from tests.support.scripted import scripted_engine
from tests.support.tiny_models import TinyModels

PROMPT = Prompt(category="code", name="p", text="def read_lines(path):\n    return open(path).read()\n")


class Recording(SpecEngine):
    """The engine, noting each request's token ids."""

    def __init__(self, engine: SpecEngine) -> None:
        super().__init__(engine.backend, clock=engine.clock)
        self.requests: list[Request] = []

    def generate(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        self.requests.append(request)
        return super().generate(request, *args, **kwargs)


def test_bench_encodes_prompts_as_run_does(tmp_path: Path) -> None:
    engine = Recording(scripted_engine())
    for raw in (False, True):
        plan = BenchPlan(
            configs=(), prompts=(PROMPT,), temperatures=(0.0,), repeats=3, max_tokens=4, raw=raw, warm_up=()
        )
        execute(engine, plan, BenchConfig("k=4", "k"), PROMPT, 0.0, seed=0)
        # what `specplay run` encodes: cli/run.py's `stream.encode(request_config.prompt, raw=request_config.raw)`
        assert engine.requests[-1].prompt_token_ids == tuple(engine.encode(PROMPT.text, raw=raw))
    assert engine.requests[0].prompt_token_ids != engine.requests[1].prompt_token_ids  # the template applied


def test_a_bench_stopped_part_way_reports_what_it_measured(tiny: TinyModels, tmp_path: Path) -> None:
    """Progress lines on a pipe (requests done of planned, time left); a SIGTERM part-way: exit 130,
    and report.md and results.json of the requests measured, saying the report is partial."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"category": "code", "text": PROMPT.text}) + "\n")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "specplay", "bench", "--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    command += ["--prompts", str(prompts), "--max-tokens", "8", "--temperatures", "0", "--out", str(out)]
    bench = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert bench.stderr is not None
    deadline = time.monotonic() + 120
    lines = []
    while True:
        line = bench.stderr.readline()
        assert line and time.monotonic() < deadline, f"no progress line before the end: {lines}"
        lines.append(line)
        if line.startswith("specplay bench: ") and int(line.split()[2].split("/")[0]) >= 3:
            break
    bench.send_signal(signal.SIGTERM)
    rest = bench.stderr.read()
    assert bench.wait(timeout=120) == 130, rest
    assert "stopped after" in rest and "writing the report of those" in rest
    assert " requests" in lines[-1] and "/" in lines[-1]
    results = json.loads((out / "results.json").read_text())
    assert results["measurements"] and "stopped part-way" in results["about"]["measured"]
    assert results["about"]["prompt format"] == "the model's chat template, where it has one"
    if sys.platform == "linux" and blas.OPENBLAS_PATH is not None:  # a tiny target: one thread, and why
        assert "too small to share its products" in results["about"]["blas threads"]
    assert "stopped part-way" in (out / "report.md").read_text()
