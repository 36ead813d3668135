"""The suffix drafter where the commands measure drafters: `specplay costs` prices its rounds and
recommends a k for it, and a quick `specplay bench` sweeps it, routes to it and says what it
read as it started, both on the demo models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.bench.sweep import load_prompts
from specplay.cli import main
from tests.support.prompts import CODE_PROMPT


def test_costs_prices_a_suffix_drafter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--target", "demo", "--draft", "mem=suffix", "--draft", "lookup=prompt-lookup", "--prompt", CODE_PROMPT]
    args += ["--repeats", "1", "--max-rows", "9", "--json", "--sessions-dir", str(tmp_path)]
    capsys.readouterr()
    assert main(["costs", *args]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert set(report["drafters"]) == {"mem", "lookup"}
    mem = report["drafters"]["mem"]
    assert mem["draft_step_ms"] >= 0 and 1 <= mem["recommended_k"] <= 8 and mem["recommended_speedup"] > 0
    assert [p["k"] for p in mem["predicted_speedup_by_k"]] == list(range(1, 9))
    assert "mem: found no earlier outputs of this target in" in err


def test_a_quick_bench_sweeps_and_routes_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECPLAY_SESSIONS_DIR", str(tmp_path / "sessions"))  # bench reads the folder from here
    prompts = tmp_path / "prompts.jsonl"
    first = [next(p for p in load_prompts(None, 1).prompts if p.category == c) for c in ("code", "prose")]
    prompts.write_text("".join(json.dumps({"category": p.category, "text": p.text}) + "\n" for p in first))
    out = tmp_path / "report"
    models = ["--target", "demo", "--draft", "mem=suffix", "--draft", "lookup=prompt-lookup"]
    flags = ["--quick", "--out", str(out), "--max-tokens", "12", "--prompts", str(prompts)]
    assert main(["bench", *models, *flags]) == 0
    assert "mem: found no earlier outputs of this target in" in capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert {("code", "route mem"), ("prose", "route mem")} <= {(r["category"], r["config"]) for r in results["rows"]}
    assert not any(r["config"] == "draft mem" for r in results["rows"])  # it cannot write alone
    routes = {r["category"]: r for r in results["routes"]}
    assert all({"mem", "lookup", "adaptive"} <= set(r["tokens_per_s"]) for r in routes.values())
