"""Which k: per category and temperature, the k the bench's fixed-k sweep measured fastest, beside
the k that the prediction of `specplay costs` recommends (engine/speedup.py) from the round costs
measured at the bench's end and the sweep's own acceptance by position, drafting and host work.

The verify pass is timed past the longest k swept, up to the policies' bound (`advice_rows`): it
is cheap beside the sweep, and the prediction can then reach the k where its curve turns, where a
sweep of k 2 and 4 would cap the advice at 4. Past the longest k swept, acceptance is its rounds'
extrapolated (engine/speedup.py, `reach_by_position`), and the report says so; where the curve
still rises at the bound, the report says the advice is capped there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specplay.bench.report import Row, cell
from specplay.bench.stats import median, summed_by_position
from specplay.bench.sweep import BenchConfig, Measurement
from specplay.engine.costs import RoundCosts, RoundsMeasured
from specplay.engine.settings import NONE_ROUTE, PolicyParams
from specplay.engine.speedup import paying_k, recommended_k

_SUMMED = ("num_spec_steps", "num_draft_tokens", "draft_ms", "overhead_ms")
K_GROUP = "k"
"""The fixed-k sweep's group (sweep.plan)."""
ADVICE_K_MAX = PolicyParams().k_max
"""The longest k the advice predicts (at least the longest swept): the policies' bound."""


def advice_rows(configs: Sequence[BenchConfig]) -> int:
    """The verify rows the round costs are timed over for the advice: those of a round of
    ADVICE_K_MAX drafts, or of the longest k swept where longer; 0 without a fixed-k sweep."""
    swept = max((c.k for c in configs if c.group == K_GROUP), default=0)
    return max(swept, ADVICE_K_MAX) + 1 if swept else 0


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
    longest_swept_k: int | None = None
    """The longest k the sweep measured: past it, acceptance is extrapolated."""
    longest_predicted_k: int | None = None
    """The longest k predicted (the verify pass timed that far)."""
    best_k: int | None = None
    """The fastest k predicted, whether or not it pays (`recommended_k` is it where it does)."""
    recommended_route: str | None = None
    """The drafter (`route`) where a k pays, the route none where none does."""
    capped: bool = False
    """The prediction still rose at the longest k predicted: the advice stops there, not where
    its curve turns."""


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
        k_max = max(verify) - 1  # as far as the verify pass was timed (`advice_rows`)
        drafter = route[0][0]
        step_ms, call_ms = cell_costs.draft_step_ms[drafter].ms, cell_costs.call_ms(drafter)
        predictions = rounds.predict(verify, step_ms, target_step_ms, k_max, draft_call_ms=call_ms)
        best, paying = recommended_k(predictions), paying_k(predictions)
        shown = paying or best  # where no k pays, the fastest k's numbers beside the advice of none
        measured = {k_of[r.config]: r.speedup for r in k_rows if r.speedup is not None}
        top = max(measured, key=lambda k: measured[k], default=None)
        out.append(
            KAdvice(
                category=category,
                temperature=temperature,
                route=drafter,
                measured_best_k=top,
                measured_best_speedup=measured[top] if top is not None else None,
                recommended_k=paying.k if paying is not None else None,
                predicted_speedup=shown.speedup if shown is not None else None,
                measured_at_recommended=measured.get(shown.k) if shown is not None else None,
                longest_swept_k=k_of[longest.config],
                longest_predicted_k=max((p.k for p in predictions), default=None),
                best_k=best.k if best is not None else None,
                recommended_route=None if best is None else drafter if paying is not None else NONE_ROUTE,
                capped=best is not None and best.k == k_max,
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
    longest = max((a.longest_predicted_k or 0 for a in advice), default=0)
    lines = [
        "",
        "## Which k",
        "",
        "The k the fixed-k sweep measured fastest, beside the k `specplay costs` recommends: its prediction",
        "from the verify pass by rows, measured at the end, and this sweep's acceptance by position (its longest",
        "k), target step and host work per round, a drafted token priced by the line through its shortest and",
        f"longest k. The verify pass is timed up to k {longest}, past the longest k swept: there each further",
        "position is taken as kept at the last measured one's rate, so a recommended k the sweep did not run is",
        "a prediction only. Where no k is predicted faster than the target alone, the advice is the route none.",
        "",
    ]
    columns = ["category", "temperature", "drafter", "measured best k", "its speedup", "recommended k"]
    columns += ["predicted", "measured there"]
    lines += ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for a in advice:
        recommended = cell(a.recommended_k, "{}")
        if a.recommended_k is None and a.recommended_route == NONE_ROUTE:
            recommended = f"route {NONE_ROUTE} (k {a.best_k} is fastest, and slower than the target)"
        elif a.capped:
            recommended += " (capped)"
        shown_k = a.recommended_k if a.recommended_k is not None else a.best_k
        swept = shown_k is not None and a.longest_swept_k is not None and shown_k <= a.longest_swept_k
        cells = [
            a.category,
            f"{a.temperature:g}",
            a.route,
            cell(a.measured_best_k, "{}"),
            cell(a.measured_best_speedup, "{:.2f}x"),
            recommended,
            cell(a.predicted_speedup, "{:.2f}x"),
            cell(a.measured_at_recommended, "{:.2f}x") if swept or shown_k is None else "not swept",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    capped = [a for a in advice if a.capped]
    if capped:
        cells = ", ".join(f"{a.category} at temperature {a.temperature:g}" for a in capped)
        lines += [
            "",
            f"Capped ({cells}): the prediction still rises at k {capped[0].longest_predicted_k}, the longest k the "
            "verify pass was timed for (the policies' bound); the best k may lie beyond it.",
        ]
    return lines
