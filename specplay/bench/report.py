"""From measurements to the report: rows per category and configuration, as Markdown, JSON, CSV."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specplay.bench.stats import median, summed_by_position
from specplay.bench.sweep import ROUTER_CHECK, BenchConfig, Measurement
from specplay.engine.correction_rank import empty_histogram, second_branch_share
from specplay.engine.speedup import (
    draft_acceptance_rate,
    mean_acceptance_length,
    measured_speedup,
    predict,
    predict_modelled,
)
from specplay.files.json_text import dump_json


@dataclass
class Row:
    category: str
    temperature: float
    config: str
    group: str
    requests: int
    tokens_per_s: float | None
    """Decode tokens/s: median over requests."""
    median_e2e_ms: float | None
    draft_acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    rounds_per_request: float | None = None
    speedup: float | None = None
    """Decode tokens/s over target-only's, same category and temperature."""
    alpha: float | None = None
    """Per-token acceptance: accepted over judged positions (engine/speedup.py)."""
    cost_ratio: float | None = None
    """c: a drafted token's time over a target-only step (median target-only tokens/s)."""
    predicted_speedup: float | None = None
    """Leviathan's formula from alpha, the mean draft length and c."""
    costed_speedup: float | None = None
    """The same expected tokens per round over the round's measured cost (verify and host work included)."""
    vs_mlx_lm: float | None = None
    """Decode tokens/s over mlx-lm's own generation of the same requests (--compare-mlx-lm)."""
    second_branch_share: float | None = None
    """The share of rejections whose correction a second branch would have held (engine/correction_rank.py)."""
    acceptance_per_position: list[float] = field(default_factory=list)
    rejection_rank_histogram: dict[str, int] | None = None
    """Rejections by their correction's rank among the drafter's tokens, summed over requests."""


_LISTS = ("acceptance_per_position", "rejection_rank_histogram")
"""Row fields that are not one value, left out of the CSV."""


_SUMMED = (
    "num_spec_steps",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "num_judged_draft_tokens",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
)


def _spec_row(row: Row, runs: Sequence[Measurement], target_step_ms: float | None, remote: bool) -> None:
    totals = {name: sum(getattr(m, name) for m in runs) for name in _SUMMED}
    steps, drafted, accepted = totals["num_spec_steps"], totals["num_draft_tokens"], totals["num_accepted_draft_tokens"]
    if not steps:
        return
    row.draft_acceptance_rate = draft_acceptance_rate(accepted, drafted)  # None: no round drafted
    row.mean_acceptance_length = mean_acceptance_length(accepted, steps)
    row.rounds_per_request = steps / len(runs)
    per_drafted = summed_by_position([m.drafted_per_position for m in runs])
    per_accepted = summed_by_position([m.accepted_per_position for m in runs])
    # Drafted counts never rise with the position (position i is drafted only after i - 1), so
    # leaving out the zeros trims the tail and keeps every index.
    row.acceptance_per_position = [a / d for a, d in zip(per_accepted, per_drafted, strict=True) if d]
    # Through vLLM the speculative lane's times are HTTP round trips: modelled as run and the playground do.
    prediction = predict_modelled(totals) if remote else predict(totals, target_step_ms)
    row.alpha, row.cost_ratio = prediction.alpha, prediction.cost_ratio
    row.predicted_speedup, row.costed_speedup = prediction.speedup, prediction.costed_speedup
    histograms = [m.rejection_rank_histogram for m in runs if m.rejection_rank_histogram is not None]
    if histograms:
        row.rejection_rank_histogram = {
            rank: sum(h.get(rank, 0) for h in histograms) for rank in empty_histogram() | histograms[0]
        }
        row.second_branch_share = second_branch_share(row.rejection_rank_histogram)


def build_rows(configs: Sequence[BenchConfig], measurements: Sequence[Measurement], remote: bool = False) -> list[Row]:
    """`remote`: vLLM inspection, where a speculative request's wall time is HTTP round trips, so
    its speedup is not measured and its prediction is modelled (c per verify call)."""
    cells: dict[tuple[str, float, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        cells[(m.category, m.temperature, m.config)].append(m)
    rows = []
    for category, temperature in dict.fromkeys((m.category, m.temperature) for m in measurements):
        tps = {
            c.label: median([m.tokens_per_s for m in cells[(category, temperature, c.label)] if m.tokens_per_s])
            for c in configs
        }
        target_tps = tps.get("target-only")
        target_runs = cells[(category, temperature, "target-only")]
        target_step_ms = median([m.mean_step_ms for m in target_runs if m.mean_step_ms])
        for config in configs:
            runs = cells[(category, temperature, config.label)]
            if not runs or config.group == ROUTER_CHECK:  # an accuracy, reported apart (router_report)
                continue
            row = Row(
                category=category,
                temperature=temperature,
                config=config.label,
                group=config.group,
                requests=len(runs),
                tokens_per_s=tps[config.label],
                median_e2e_ms=median([m.e2e_ms for m in runs]),
            )
            if not (remote and config.mode == "speculative"):  # remote: HTTP round trips, not a speed
                row.speedup = measured_speedup(row.tokens_per_s, target_tps)
            theirs = median([m.mlx_lm_tokens_per_s for m in runs if m.mlx_lm_tokens_per_s])
            if theirs and row.tokens_per_s:
                row.vs_mlx_lm = row.tokens_per_s / theirs
            if config.mode == "speculative":
                _spec_row(row, runs, target_step_ms, remote)
            rows.append(row)
    return rows


@dataclass
class RouterCase:
    """One prompt at one temperature in the router check."""

    prompt: str
    category: str
    temperature: float
    routed: str | None
    labelled: str | None
    """The drafter the prompt's category maps to (None: a category the router does not know)."""
    mean_acceptance_length: dict[str, float]
    """Each drafter's, averaged over the repeats."""

    @property
    def best(self) -> list[str]:
        top = max(self.mean_acceptance_length.values())
        return [name for name, value in self.mean_acceptance_length.items() if value >= top - 1e-9]

    @property
    def regret(self) -> float:
        top = max(self.mean_acceptance_length.values())
        return top - self.mean_acceptance_length.get(self.routed or "", top)


def router_report(measurements: Sequence[Measurement], route_map: dict[str, str]) -> dict[str, Any] | None:
    """The router's accuracy two ways: on labels (the prompt's category sent where the route map
    sends it) and by acceptance (the drafter that accepted most on this prompt, counterfactually)."""
    checks = [m for m in measurements if m.counterfactual]
    if not checks:
        return None
    grouped: dict[tuple[str, str, float], list[Measurement]] = defaultdict(list)
    for m in checks:
        grouped[(m.category, m.prompt, m.temperature)].append(m)
    cases = []
    for (category, prompt, temperature), runs in grouped.items():
        names = runs[0].counterfactual or {}
        means = {name: sum((m.counterfactual or {})[name] for m in runs) / len(runs) for name in names}
        case = RouterCase(
            prompt=prompt,
            category=category,
            temperature=temperature,
            routed=runs[0].route,
            labelled=route_map.get(category),
            mean_acceptance_length=means,
        )
        cases.append(case)
    labelled = [c for c in cases if c.labelled is not None]
    return {
        "accuracy_on_labels": sum(c.routed == c.labelled for c in labelled) / len(labelled) if labelled else None,
        "accuracy_by_acceptance": sum(c.routed in c.best for c in cases) / len(cases),
        "mean_route_regret": sum(c.regret for c in cases) / len(cases),
        "cases": [asdict(c) | {"best": c.best, "regret": c.regret} for c in cases],
    }


def router_markdown(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Router check",
        "",
        "Each prompt run routed as `--route auto` would, with every other drafter's proposal judged from the same",
        "contexts each round (counterfactual routes). Accuracy on labels: the prompt's category sent to the drafter",
        "the route map names. Accuracy by acceptance: the routed drafter is the one with the highest mean",
        "acceptance length on that prompt. Route regret: the best drafter's mean acceptance length minus the",
        "routed one's.",
        "",
        f"- accuracy on labels: {cell(report['accuracy_on_labels'], '{:.0%}')}",
        f"- accuracy by acceptance: {report['accuracy_by_acceptance']:.0%}",
        f"- mean route regret: {report['mean_route_regret']:.2f} tokens per round",
        "",
        "| prompt | category | temperature | routed | by label | most accepted | mean acceptance lengths | regret |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case in report["cases"]:
        lengths = ", ".join(f"{name} {value:.2f}" for name, value in case["mean_acceptance_length"].items())
        cells = [
            case["prompt"],
            case["category"],
            f"{case['temperature']:g}",
            str(case["routed"]),
            str(case["labelled"] or "–"),
            ", ".join(case["best"]),
            lengths,
            f"{case['regret']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cell(value: float | None, pattern: str) -> str:
    """A table cell: the value by `pattern`, or a dash where there is none."""
    return "–" if value is None else pattern.format(value)


def markdown(
    rows: Sequence[Row],
    about: dict[str, Any],
    router: dict[str, Any] | None = None,
    remote: bool = False,
    spec_bench: Sequence[str] | None = None,
) -> str:
    """`remote`: the speculative requests' wall time was not a speed (Capabilities.wall_time_is_speed);
    `spec_bench`: the Spec-Bench tasks' section (a file of Spec-Bench questions), first, and the
    sections by category are then by task and turn."""
    lines = ["# specplay bench", ""]
    lines += [f"- {key}: {value}" for key, value in about.items() if not isinstance(value, dict | list)]
    if spec_bench is not None:
        lines += [*spec_bench, "", "## specplay's measures by task", ""]
        lines += [
            "Each turn of a question is one request below: its medians and specplay's speedup, decode tokens/s",
            "(after the first token) over target-only's, not Spec-Bench's.",
        ]
    lines += [
        "",
        "Decode tokens/s is the median over requests of (tokens after the first delivery) / (time since it);",
        "speedup divides it by target-only's in the same category and temperature. The predicted speedup is",
        "Leviathan et al.'s (1 - a^(k+1)) / ((1 - a)(k c + 1)), with a the per-token acceptance (accepted over",
        "judged draft positions), k the mean draft length and c a drafted token's time over a target-only step;",
        "costed divides the same expected tokens per round by the round's measured cost (k c + verify + host,",
        "in target steps) instead of k c + 1. Second branch: the share of rejections whose correction was among the",
        "drafter's two most likely tokens, which a draft tree with two branches there would have held.",
    ]
    if remote:
        lines += [
            "",
            "Through vLLM servers a speculative request's tokens/s times HTTP round trips and server recomputes, not",
            "speculative speed, so its speedup is not given; the prediction is modelled, with c a drafted token's",
            "time over a verify call's (as `specplay run` and the playground model it).",
        ]
    columns = ["configuration", "acceptance rate", "mean acceptance length", "rounds / request"]
    columns += ["median e2e ms", "tokens/s", "speedup", "predicted", "costed", "vs mlx-lm", "second branch"]
    header = "| " + " | ".join(columns) + " |"
    for category, temperature in dict.fromkeys((r.category, r.temperature) for r in rows):
        lines += ["", f"## {category}, temperature {temperature:g}", "", header, "|" + " --- |" * len(columns)]
        for r in (r for r in rows if (r.category, r.temperature) == (category, temperature)):
            cells = [
                r.config,
                cell(r.draft_acceptance_rate, "{:.1%}"),
                cell(r.mean_acceptance_length, "{:.2f}"),
                cell(r.rounds_per_request, "{:.1f}"),
                cell(r.median_e2e_ms, "{:.0f}"),
                cell(r.tokens_per_s, "{:.1f}"),
                cell(r.speedup, "{:.2f}x"),
                cell(r.predicted_speedup, "{:.2f}x"),
                cell(r.costed_speedup, "{:.2f}x"),
                cell(r.vs_mlx_lm, "{:.2f}x"),
                cell(r.second_branch_share, "{:.0%}"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    if router is not None:
        lines += router_markdown(router)
    return "\n".join(lines) + "\n"


def to_json(
    rows: Sequence[Row],
    measurements: Sequence[Measurement],
    about: dict[str, Any],
    router: dict[str, Any] | None = None,
    k_advice: Sequence[Any] = (),
    routes: Sequence[Any] = (),
    spec_bench: Sequence[Any] = (),
) -> str:
    """`k_advice`: k_advice.KAdvice entries; `routes`: routes.RouteComparison entries;
    `spec_bench`: spec_bench_report.SpecBenchEntry entries (dataclasses)."""
    payload = {
        "about": about,
        "rows": [asdict(r) for r in rows],
        "router": router,
        "k_advice": [asdict(a) for a in k_advice],
        "routes": [asdict(r) for r in routes],
        **({"spec_bench": [asdict(e) for e in spec_bench]} if spec_bench else {}),
        "measurements": [asdict(m) for m in measurements],
    }
    return dump_json(payload, indent=2, ensure_ascii=False) + "\n"


def to_csv(rows: Sequence[Row]) -> str:
    out = io.StringIO()
    names = [name for name in Row.__dataclass_fields__ if name not in _LISTS]
    writer = csv.DictWriter(out, fieldnames=names, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow(asdict(row))
    return out.getvalue()
