"""Running a bench: every configuration on every prompt and temperature, repeat after repeat,
each request on the thread that owns the models."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from specplay.bench.stats import needs_more_repeats
from specplay.bench.sweep import BenchConfig, Measurement, measure
from specplay.data.library import Prompt
from specplay.engine.conversation import Exchange
from specplay.engine.events import DoneEvent, RoundEvent, StartEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.settings import AUTO_ROUTE, SpecSettings
from specplay.engine.stream import EventStream

T = TypeVar("T")
OnModelThread = Callable[[Callable[[], T]], T]
"""Runs a call where the models live (the runner's ModelThread.call) and returns its result."""
MlxLmTimer = Callable[[tuple[int, ...], int, str | None, int], float | None]
"""mlx-lm's greedy tokens/s on (prompt ids, max tokens, drafter or None, k), for --compare-mlx-lm."""
OnProgress = Callable[[str, int, int], None]
"""(what runs now, requests done, requests planned)."""


@dataclass(frozen=True)
class BenchPlan:
    configs: Sequence[BenchConfig]
    prompts: Sequence[Prompt]
    temperatures: Sequence[float]
    repeats: int
    """At least 3; 5 when a throughput varies by more than 5% over the first 3."""
    max_tokens: int
    raw: bool
    """Prompts encoded as written (--raw); else through the chat template, as `run` encodes them."""
    warm_up: Sequence[BenchConfig]
    """Configurations run once, untimed, before the sweep: every model's first call."""
    mlx_lm: MlxLmTimer | None = None
    ignore_eos: bool = True
    """A fixed output length. False (Spec-Bench's questions): each answer ends at the end of text,
    as Spec-Bench's do, or at max_tokens, and the next turn follows that answer."""
    by_prompt: bool = False
    """Each prompt under every configuration in turn before the next prompt, so a speedup's two
    sides are measured seconds apart, not a configuration's whole pass apart (Spec-Bench's
    questions, whose speedup is taken per question); else each configuration over every prompt."""


def execute(
    stream: EventStream, plan: BenchPlan, cell: BenchConfig, prompt: Prompt, temperature: float, seed: int
) -> list[dict[str, Any]]:
    """The requests of `cell` on `prompt`, one per turn, each after this configuration's own
    earlier answers, the later ones continuing (the mode's caches kept): each its metrics, route,
    end-to-end time, draft lengths and answer."""
    settings = cell.settings.changed(temperature=temperature)
    earlier: list[Exchange] = []
    results = []
    for turn, text in enumerate(prompt.turns):
        ids = tuple(stream.encode(text, raw=plan.raw, earlier=earlier))
        request = Request(
            text,
            ids,
            cell.mode,  # type: ignore[arg-type]
            seed,
            plan.max_tokens,
            ignore_eos=plan.ignore_eos,
            continues=turn > 0,
        )
        result = _request(stream, plan, cell, request, settings, temperature)
        earlier.append(Exchange(text, result["answer"]))
        results.append(result)
    return results


def _request(
    stream: EventStream,
    plan: BenchPlan,
    cell: BenchConfig,
    request: Request,
    settings: SpecSettings,
    temperature: float,
) -> dict[str, Any]:
    start = time.perf_counter()
    events = list(stream.generate(request, LiveControls(settings, stream.drafters)))
    e2e_ms = 1000 * (time.perf_counter() - start)
    first, last = events[0], events[-1]
    assert isinstance(first, StartEvent) and isinstance(last, DoneEvent)
    lengths = [e.depth for e in events if isinstance(e, RoundEvent)]
    result = {"metrics": last.metrics, "route": first.drafter, "e2e_ms": e2e_ms, "draft_lengths": lengths}
    result["answer"] = last.text
    ids = request.prompt_token_ids
    # mlx-lm's rule equals specplay's only when greedy, so only greedy requests are compared.
    comparable = cell.mode == "target" or (cell.group == "k" and cell.route == AUTO_ROUTE)
    if plan.mlx_lm is not None and temperature == 0 and comparable:
        k = cell.k if cell.mode == "speculative" else 0
        result["mlx_lm_tokens_per_s"] = plan.mlx_lm(ids, plan.max_tokens, first.drafter, k)
    return result


def run_bench(
    stream: EventStream,
    plan: BenchPlan,
    on_model_thread: OnModelThread,
    on_progress: OnProgress,
    measurements: list[Measurement],
) -> None:
    """The warm-up, then the sweep, each request's measurement appended to `measurements` as it
    is made (a bench stopped part-way keeps them); two more repeats when any throughput varies
    by more than 5%."""

    def run(cell: BenchConfig, prompt: Prompt, temperature: float, seed: int) -> list[dict[str, Any]]:
        return execute(stream, plan, cell=cell, prompt=prompt, temperature=temperature, seed=seed)

    for cell in plan.warm_up:
        on_model_thread(lambda c=cell: run(c, plan.prompts[0], 0.0, 0))
    if plan.by_prompt:
        cells = [(c, p, t) for t in plan.temperatures for p in plan.prompts for c in plan.configs]
    else:
        cells = [(c, p, t) for t in plan.temperatures for c in plan.configs for p in plan.prompts]
    requests = sum(len(p.turns) for _, p, _ in cells)  # a request per turn
    repeats, repeat = plan.repeats, 0
    while repeat < repeats:
        for cell, prompt, temperature in cells:
            what = f"{cell.label} · {prompt.name} · T={temperature:g} · repeat {repeat + 1}"
            on_progress(what, len(measurements), requests * repeats)
            measured = on_model_thread(lambda c=cell, p=prompt, t=temperature, r=repeat: measure(run, c, p, t, r))
            measurements.extend(measured)
        repeat += 1
        if repeat == repeats == 3 and needs_more_repeats(_throughputs(measurements)):
            repeats = 5
    on_progress("done", len(measurements), len(measurements))


def _throughputs(measurements: list[Measurement]) -> list[list[float]]:
    series: dict[tuple[str, str, str, int, float], list[float]] = {}
    for m in measurements:
        if m.tokens_per_s:
            series.setdefault((m.config, m.category, m.prompt, m.turn, m.temperature), []).append(m.tokens_per_s)
    return list(series.values())
