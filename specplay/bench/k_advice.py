"""Which k: per category and temperature, the k the bench's fixed-k sweep measured fastest, beside
the k that the prediction of `specplay costs` recommends (engine/speedup.py) from the round costs
measured at the bench's end and the sweep's own acceptance by position, drafting and host work."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specplay.bench.report import Row, cell
from specplay.bench.stats import median, summed_by_position
from specplay.bench.sweep import BenchConfig, Measurement
from specplay.engine.costs import RoundCosts, RoundsMeasured
from specplay.engine.speedup import recommended_k

_SUMMED = ("num_spec_steps", "num_draft_tokens", "draft_ms", "overhead_ms")
K_GROUP = "k"
"""The fixed-k sweep's group (sweep.plan)."""


@dataclass(frozen=True)
class KAdvice:
    category: str
    temperature: float
    route: str
    """The drafter the sweep's longest-k requests were routed to (its step prices the prediction)."""
    measured_best_k: int | None
    measured_best_speedup: float | None
    recommended_k: int | None
    predicted_speedup: float | None
    measured_at_recommended: float | None
    """The sweep's measured speedup at the recommended k (None where the sweep did not run it)."""


def k_advice(
    configs: Sequence[BenchConfig],
    rows: Sequence[Row],
    measurements: Sequence[Measurement],
    costs: Mapping[float, RoundCosts],
) -> list[KAdvice]:
    """One entry per category and temperature that has fixed-k rows and round costs measured at its
    temperature."""
    k_of = {c.label: c.k for c in configs if c.group == K_GROUP}
    out = []
    for category, temperature in dict.fromkeys((r.category, r.temperature) for r in rows):
        cell_costs = costs.get(temperature)
        k_rows = [r for r in rows if (r.category, r.temperature) == (category, temperature) and r.config in k_of]
        if cell_costs is None or not k_rows:
            continue
        longest = max(k_rows, key=lambda r: k_of[r.config])
        shortest = min(k_rows, key=lambda r: k_of[r.config])
        cell = [m for m in measurements if (m.category, m.temperature) == (category, temperature)]
        runs = [m for m in cell if m.config == longest.config]
        targets = [m.mean_step_ms for m in cell if m.config == "target-only" and m.mean_step_ms]
        route = Counter(m.route for m in runs if m.route).most_common(1)
        target_step_ms = median(targets) or cell_costs.target_step_ms.ms
        if not route or route[0][0] not in cell_costs.draft_step_ms:
            continue
        if not sum(m.num_spec_steps for m in runs):
            continue
        rounds = _summed(runs, longest.acceptance_per_position).asked(k_of[longest.config])
        short_runs = [m for m in cell if m.config == shortest.config]
        if k_of[shortest.config] < k_of[longest.config] and sum(m.num_spec_steps for m in short_runs):
            # The drafter's cost per drafted token and per round as the sweep's rounds paid them:
            # the line through its longest and shortest k (the step timed alone can understate it).
            rounds = rounds.with_short_rounds(_summed(short_runs, shortest.acceptance_per_position))
        verify = {n: t.ms for n, t in cell_costs.verify_ms.items()}
        k_max = min(k_of[longest.config], max(verify) - 1)
        drafter = route[0][0]
        step_ms, call_ms = cell_costs.draft_step_ms[drafter].ms, cell_costs.call_ms(drafter)
        predictions = rounds.predict(verify, step_ms, target_step_ms, k_max, draft_call_ms=call_ms)
        best = recommended_k(predictions)
        measured = {k_of[r.config]: r.speedup for r in k_rows if r.speedup is not None}
        top = max(measured, key=lambda k: measured[k], default=None)
        out.append(
            KAdvice(
                category=category,
                temperature=temperature,
                route=route[0][0],
                measured_best_k=top,
                measured_best_speedup=measured[top] if top is not None else None,
                recommended_k=best.k if best is not None else None,
                predicted_speedup=best.speedup if best is not None else None,
                measured_at_recommended=measured.get(best.k) if best is not None else None,
            )
        )
    return out


def _summed(runs: Sequence[Measurement], acceptance_per_position: list[float]) -> RoundsMeasured:
    """The rounds of several requests as one run's (`acceptance_per_position`: the row's)."""
    summed: dict[str, object] = {name: sum(getattr(m, name) for m in runs) for name in _SUMMED}
    summed["num_drafted_per_position"] = summed_by_position([m.drafted_per_position for m in runs])
    summed["num_accepted_per_position"] = summed_by_position([m.accepted_per_position for m in runs])
    return RoundsMeasured.of(summed | {"acceptance_per_position": acceptance_per_position})


def k_advice_markdown(advice: Sequence[KAdvice]) -> list[str]:
    lines = [
        "",
        "## Which k",
        "",
        "The k the fixed-k sweep measured fastest, beside the k `specplay costs` recommends: its prediction",
        "from the verify pass by rows, measured at the end, and this sweep's acceptance by position (its longest",
        "k), target step and host work per round, a drafted token priced by the line through its shortest and",
        "longest k.",
        "",
    ]
    columns = ["category", "temperature", "drafter", "measured best k", "its speedup", "recommended k"]
    columns += ["predicted", "measured there"]
    lines += ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for a in advice:
        cells = [
            a.category,
            f"{a.temperature:g}",
            a.route,
            cell(a.measured_best_k, "{}"),
            cell(a.measured_best_speedup, "{:.2f}x"),
            cell(a.recommended_k, "{}"),
            cell(a.predicted_speedup, "{:.2f}x"),
            cell(a.measured_at_recommended, "{:.2f}x"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
