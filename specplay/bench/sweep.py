"""What `specplay bench` runs: the configurations, the prompts, and one measured request each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplay.data import spec_bench
from specplay.data.library import Prompt, PromptFile, library_prompts, read_prompt_file
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
    """One request (one turn of a conversation): what the engine reported, and its end-to-end latency."""

    config: str
    category: str
    """The prompt's category; a Spec-Bench question's task."""
    prompt: str
    """The prompt's name; a Spec-Bench question's question_id."""
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
    turn: int = 0
    """Which turn of the prompt's conversation (0: its first, or only, prompt)."""
    answer: str = ""
    """The text the configuration answered, which its next turn follows."""


def _set(**changes: object) -> SpecSettings:
    """The default settings with one sweep's change."""
    return SpecSettings().changed(**changes)


BASELINE = "target-only"
"""The label of the row every speedup divides by."""
CONTROL = "target-only (A/A)"
"""Target-only again, measured after every other configuration (of each prompt, where the bench
runs them prompt by prompt): a speedup's noise floor."""
DRAFT_ONLY = "draft-only"
SWEEPS = (DRAFT_ONLY, "k", "policy", "width", "tv", "route", "router")
"""What --sweeps chooses among (target-only always runs): draft-only, then the groups."""


def warm_up_configs(drafters: Sequence[str], copy_only: Sequence[str] = ()) -> list[BenchConfig]:
    """Target-only, then each drafter alone that can write: every model's first call."""
    return [BenchConfig(BASELINE, "baseline", mode="target"), *_draft_only(drafters, copy_only)]


def _draft_only(drafters: Sequence[str], copy_only: Sequence[str]) -> list[BenchConfig]:
    alone = [name for name in drafters if name not in copy_only]
    return [BenchConfig(f"{DRAFT_ONLY} {name}", "baseline", mode="draft", settings=_set(route=name)) for name in alone]


def plan(
    drafters: Sequence[str],
    quick: bool,
    copy_only: Sequence[str] = (),
    counterfactual: bool = False,
    round_routes: bool = True,
    trees: bool = False,
    sweeps: Sequence[str] = SWEEPS,
    control: bool = False,
) -> list[BenchConfig]:
    """Target-only, draft-only, fixed k, each adaptive policy (quick: the cost policy alone), draft
    trees where the backend verifies them (`trees`: each beside the fixed k of as many nodes, the
    same verify rows), TV budgets and routes. Drafters in `copy_only` (prompt lookup) cannot write alone: they get no
    draft-only row. With several drafters: each pinned, no speculation (none), the request
    router's choice (auto) and, where the backend can change drafters between rounds
    (`round_routes`), per-round routing (adaptive); and where it can (`counterfactual`), a router
    check: the routed run with every other drafter judged from the same contexts. `sweeps`: those
    of SWEEPS to run (target-only always runs); `control`: target-only again, last (the A/A row)."""
    configs = _sweep(drafters, quick, copy_only, counterfactual, round_routes, trees)
    kept = [c for c in configs if c.label == BASELINE or _sweep_of(c) in sweeps]
    return [*kept, BenchConfig(CONTROL, "baseline", mode="target")] if control else kept


def _sweep_of(config: BenchConfig) -> str:
    return DRAFT_ONLY if config.mode == "draft" else config.group


def _sweep(
    drafters: Sequence[str],
    quick: bool,
    copy_only: Sequence[str],
    counterfactual: bool,
    round_routes: bool,
    trees: bool,
) -> list[BenchConfig]:
    configs = warm_up_configs(drafters, copy_only)
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


def load_prompts(path: Path | None, per_category: int) -> PromptFile:
    """The first `per_category` prompts of each category, from a prompt file or the shipped
    library; of a Spec-Bench file, `per_category` questions of each task (spec_bench.pick)."""
    found = PromptFile(library_prompts()) if path is None else read_prompt_file(path)
    chosen: list[Prompt] = []
    if found.spec_bench:
        chosen = spec_bench.pick(found.prompts, per_category)
    else:
        for category in dict.fromkeys(p.category for p in found.prompts):
            chosen += [p for p in found.prompts if p.category == category][:per_category]
    if not chosen:
        raise ConfigError("prompts", f"{path or 'the shipped prompt library'} holds no prompts")
    return PromptFile(chosen, found.spec_bench)


Execute = Callable[[BenchConfig, Prompt, float, int], list[dict[str, Any]]]


def measure(
    execute: Execute, config: BenchConfig, prompt: Prompt, temperature: float, repeat: int
) -> list[Measurement]:
    """Run one prompt, each of its turns a request (seeded by the repeat, so sampled runs differ),
    and keep each turn's numbers."""
    seed = repeat
    return [
        _measurement(config, prompt, temperature, repeat, turn, result)
        for turn, result in enumerate(execute(config, prompt, temperature, seed))
    ]


def _measurement(
    config: BenchConfig, prompt: Prompt, temperature: float, repeat: int, turn: int, result: dict[str, Any]
) -> Measurement:
    seed = repeat
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
        turn=turn,
        answer=result["answer"],
    )
