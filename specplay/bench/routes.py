"""Which route: per category and temperature, the decode tokens/s of each single route (a drafter
pinned, or `none`, no speculation) beside the request router's choice (`auto`: the heuristic, or
the learned router given with --router) and per-round routing (`adaptive`), each over the best
single route's: the best fixed choice a user could have made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specplay.bench.report import Row, cell
from specplay.bench.sweep import BenchConfig
from specplay.engine.settings import ROUTE_SETTINGS

ROUTE_GROUP = "route"
"""The route sweep's group (sweep.plan): one row per drafter, none, then auto and adaptive."""


@dataclass(frozen=True)
class RouteComparison:
    category: str
    temperature: float
    tokens_per_s: dict[str, float | None]
    """Decode tokens/s by route: each drafter's name, auto, adaptive."""
    best_single: str | None
    """The single route (a drafter, or none) that was fastest here."""
    over_best_single: dict[str, float | None]
    """auto's and adaptive's tokens/s over the best single route's."""


def route_comparison(configs: Sequence[BenchConfig], rows: Sequence[Row]) -> list[RouteComparison]:
    """One entry per category and temperature that has route rows."""
    route_of = {c.label: c.route for c in configs if c.group == ROUTE_GROUP}
    out = []
    for category, temperature in dict.fromkeys((r.category, r.temperature) for r in rows):
        here = {
            route_of[r.config]: r.tokens_per_s
            for r in rows
            if (r.category, r.temperature) == (category, temperature) and r.config in route_of
        }
        if not here:
            continue
        singles = {name: tps for name, tps in here.items() if name not in ROUTE_SETTINGS and tps is not None}
        best = max(singles, key=lambda name: singles[name], default=None)
        over = {}
        for name in ROUTE_SETTINGS:
            tps = here.get(name)
            over[name] = tps / singles[best] if best is not None and tps is not None and singles[best] else None
        out.append(RouteComparison(category, temperature, here, best, over))
    return out


def route_markdown(comparisons: Sequence[RouteComparison]) -> list[str]:
    if not comparisons:
        return []
    routes = list(dict.fromkeys(name for c in comparisons for name in c.tokens_per_s))
    lines = [
        "",
        "## Which route",
        "",
        "Decode tokens/s of each drafter pinned, of `none` (no speculation), of `auto` (the request router's",
        "one route per request) and of `adaptive` (a route per round, from what the run measures); the last",
        "columns divide auto's and adaptive's by the best single route's (a drafter pinned, or none).",
        "",
    ]
    columns = ["category", "temperature", *routes, "best single", "auto / best", "adaptive / best"]
    lines += ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for c in comparisons:
        cells = [c.category, f"{c.temperature:g}", *(cell(c.tokens_per_s.get(name), "{:.1f}") for name in routes)]
        cells += [c.best_single or "–", *(cell(c.over_best_single[name], "{:.2f}x") for name in ROUTE_SETTINGS)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
