"""`specplay costs` through vLLM servers (fake ones over HTTP, each running a tiny MLX model): the
same measurements, every time labelled as holding an HTTP round trip."""

from __future__ import annotations

import json

import pytest

from specplay.cli import main
from tests.support.fake_vllm import FakeVllm
from tests.support.prompts import CODE_PROMPT


def test_costs_through_vllm_say_they_include_http(
    servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str]
) -> None:
    target, near = servers
    urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--repeats", "1", "--max-rows", "5", "--k-max", "4"]
    assert main(["costs", *urls, *args, "--acceptance-tokens", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["includes_http"] is True
    assert [row["rows"] for row in report["verify_ms"]] == [1, 2, 3, 4, 5]
    near_costs = report["drafters"]["near"]
    assert [p["k"] for p in near_costs["predicted_speedup_by_k"]] == [1, 2, 3, 4]
    assert near_costs["best_k"] in (1, 2, 3, 4) and near_costs["draft_step_ms"] > 0
    assert main(["costs", *urls, *args, "--acceptance-tokens", "8"]) == 0
    assert "each time includes an HTTP round trip" in capsys.readouterr().out
