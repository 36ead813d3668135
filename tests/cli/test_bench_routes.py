"""bench's "Which route": each drafter pinned beside auto and adaptive, over the best single drafter."""

from __future__ import annotations

import pytest

from specplay.bench.report import build_rows
from specplay.bench.routes import route_comparison, route_markdown
from specplay.bench.sweep import BenchConfig, Measurement, plan
from specplay.engine.settings import SpecSettings


def _m(config: str, category: str, tokens_per_s: float) -> Measurement:
    return Measurement(config, category, "p", 0.0, 0, 0, "a", 32, 100.0, tokens_per_s, num_spec_steps=8)


def test_the_plan_routes_each_drafter_then_none_auto_and_adaptive_where_rounds_can_switch() -> None:
    labels = [c.label for c in plan(["a", "b"], quick=True) if c.group == "route"]
    assert labels == ["route a", "route b", "route none", "route auto", "route adaptive"]
    labels = [c.label for c in plan(["a", "b"], quick=True, round_routes=False) if c.group == "route"]
    assert labels == ["route a", "route b", "route none", "route auto"]
    assert not [c for c in plan(["a"], quick=True) if c.group == "route"]  # one drafter: nothing to route


def test_auto_and_adaptive_over_the_best_single_drafter_per_category() -> None:
    configs = [
        BenchConfig(f"route {name}", "route", settings=SpecSettings(route=name))
        for name in ("a", "b", "auto", "adaptive")
    ]
    speeds = {"code": {"a": 100.0, "b": 50.0, "auto": 90.0, "adaptive": 110.0}, "prose": {"a": 40.0, "b": 80.0}}
    measurements = [_m(f"route {name}", category, tps) for category, by in speeds.items() for name, tps in by.items()]
    rows = build_rows(configs, measurements)
    code, prose = route_comparison(configs, rows)
    assert code.category == "code" and code.best_single == "a"
    assert code.over_best_single == {"auto": pytest.approx(0.9), "adaptive": pytest.approx(1.1)}
    assert prose.best_single == "b" and prose.over_best_single == {"auto": None, "adaptive": None}
    lines = route_markdown([code, prose])
    assert "## Which route" in lines
    assert "| code | 0 | 100.0 | 50.0 | 90.0 | 110.0 | a | 0.90x | 1.10x |" in lines
    assert "| prose | 0 | 40.0 | 80.0 | – | – | b | – | – |" in lines
