"""What `specplay bench` runs: the configurations, the prompts, and one measured request each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplay.data.library import Prompt, library_prompts, read_prompts
from specplay.engine.rules import Mentored
from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE, SpecSettings
from specplay.errors import ConfigError


@dataclass(frozen=True)
class BenchConfig:
    label: str
    group: str
    """baseline, k, policy, width, tv or route: which sweep the configuration belongs to."""
    mode: str = "speculative"
    settings: SpecSettings = field(default_factory=SpecSettings)
    """The live settings it runs with, the user's defaults but what its group varies (the
    temperature is the sweep's). With counterfactual routes on: the router check, not a speed."""

    @property
    def k(self) -> int:
        return self.settings.k

    @property
    def route(self) -> str:
        return self.settings.route


@dataclass
class Measurement:
    """One request: what the engine reported, and its end-to-end latency."""

    config: str
    category: str
    prompt: str
    temperature: float
    repeat: int
    seed: int
    route: str | None
    num_tokens: int
    e2e_ms: float
    tokens_per_s: float | None
    mean_step_ms: float | None = None
    """Target-only and draft-only requests: one step's mean time."""
    num_spec_steps: int = 0
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0
    num_judged_draft_tokens: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    overhead_ms: float = 0.0
    draft_lengths: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    mlx_lm_tokens_per_s: float | None = None
    """mlx-lm's own generation on the same request, when compared (greedy target-only and fixed k)."""
    counterfactual: dict[str, float] | None = None
    """The router check: each drafter's mean acceptance length on this request."""
    rejection_rank_histogram: dict[str, int] | None = None
    """Rejections by their correction's rank among the drafter's tokens (engine/correction_rank.py)."""


def _set(**changes: object) -> SpecSettings:
    """The default settings with one sweep's change."""
    return SpecSettings().changed(**changes)


def plan(
    drafters: Sequence[str],
    quick: bool,
    copy_only: Sequence[str] = (),
    counterfactual: bool = False,
    round_routes: bool = True,
    trees: bool = False,
) -> list[BenchConfig]:
    """Target-only, draft-only, fixed k, each adaptive policy (quick: the cost policy alone), draft
    trees where the backend verifies them (`trees`: each beside the fixed k of as many nodes, the
    same verify rows), TV budgets and routes. Drafters in `copy_only` (prompt lookup) cannot write alone: they get no
    draft-only row. With several drafters: each pinned, no speculation (none), the request
    router's choice (auto) and, where the backend can change drafters between rounds
    (`round_routes`), per-round routing (adaptive); and where it can (`counterfactual`), a router
    check: the routed run with every other drafter judged from the same contexts."""
    configs = [BenchConfig("target-only", "baseline", mode="target")]
    alone = [name for name in drafters if name not in copy_only]
    configs += [
        BenchConfig(f"draft-only {name}", "baseline", mode="draft", settings=_set(route=name)) for name in alone
    ]
    configs += [BenchConfig(f"k={k}", "k", settings=_set(k=k)) for k in ((2, 4) if quick else (2, 4, 6, 8))]
    policies = ("cost",) if quick else ("acceptance-rate", "accepted-length", "confidence", "cost")
    configs += [BenchConfig(policy, "policy", settings=_set(policy=policy)) for policy in policies]
    if trees:
        shapes = ((2, 4),) if quick else ((2, 4), (2, 8), (3, 8))  # (width, nodes): beside k=4 and k=8
        configs += [
            BenchConfig(f"width {w}, {n} nodes", WIDTH_GROUP, settings=_set(k=n, width=w, tree_nodes=n))
            for w, n in shapes
        ]
    budgets = (0.5, 1.0) if quick else (0.5, 0.75, 1.0)  # D=0 is the k=4 row
    configs += [
        BenchConfig(Mentored(tv_budget=budget).row_label(), "tv", settings=_set(tv_budget=budget)) for budget in budgets
    ]
    if len(drafters) > 1:
        routes = (*drafters, NONE_ROUTE, AUTO_ROUTE, *((ADAPTIVE_ROUTE,) if round_routes else ()))
        configs += [BenchConfig(f"route {name}", "route", settings=_set(route=name)) for name in routes]
        if counterfactual:
            configs.append(BenchConfig("router check", ROUTER_CHECK, settings=_set(counterfactual=True)))
    return configs


WIDTH_GROUP = "width"
"""The group of draft trees (engine/tree.py), each a label's width and node budget."""
ROUTER_CHECK = "router"
"""The group of the router check: it measures which drafter accepts most, not a speed."""


def load_prompts(path: Path | None, per_category: int) -> list[Prompt]:
    """The first `per_category` prompts of each category, from a prompt file or the shipped library."""
    prompts = library_prompts() if path is None else read_prompts(path)
    chosen: list[Prompt] = []
    for category in dict.fromkeys(p.category for p in prompts):
        chosen += [p for p in prompts if p.category == category][:per_category]
    if not chosen:
        raise ConfigError("prompts", f"{path or 'the shipped prompt library'} holds no prompts")
    return chosen


Execute = Callable[[BenchConfig, Prompt, float, int], dict[str, Any]]


def measure(execute: Execute, config: BenchConfig, prompt: Prompt, temperature: float, repeat: int) -> Measurement:
    """Run one request (seeded by the repeat, so sampled runs differ) and keep its numbers."""
    seed = repeat
    result = execute(config, prompt, temperature, seed)
    metrics = result["metrics"]
    return Measurement(
        config=config.label,
        category=prompt.category,
        prompt=prompt.name,
        temperature=temperature,
        repeat=repeat,
        seed=seed,
        route=result["route"],
        num_tokens=metrics["num_tokens"],
        e2e_ms=result["e2e_ms"],
        tokens_per_s=metrics["tokens_per_s"],
        mean_step_ms=metrics.get("mean_step_ms"),
        num_spec_steps=metrics["num_spec_steps"] or 0,
        num_draft_tokens=metrics["num_draft_tokens"] or 0,
        num_accepted_draft_tokens=metrics["num_accepted_draft_tokens"] or 0,
        num_judged_draft_tokens=metrics["num_judged_draft_tokens"] or 0,
        draft_ms=metrics["draft_ms"] or 0.0,
        verify_ms=metrics["verify_ms"] or 0.0,
        overhead_ms=metrics["overhead_ms"] or 0.0,
        draft_lengths=result["draft_lengths"],
        drafted_per_position=metrics["num_drafted_per_position"] or [],
        accepted_per_position=metrics["num_accepted_per_position"] or [],
        mlx_lm_tokens_per_s=result.get("mlx_lm_tokens_per_s"),
        rejection_rank_histogram=metrics.get("rejection_rank_histogram"),
        counterfactual={
            name: entry["mean_acceptance_length"] for name, entry in (metrics.get("counterfactual") or {}).items()
        }
        or None,
    )
