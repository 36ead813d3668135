"""A fidelity sweep as a review: its table over all seeds, then each seed's texts side by side
(target-only, draft-only, one column per TV budget), aligned to that seed's target-only text.
A sweep of several rules shows, beside the references, one column per rule at matched acceptance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specplay.engine.rules import KNOB_FIELDS
from specplay.fidelity.cells import row_cells
from specplay.fidelity.measure import DRAFT_ROW, TARGET_ROW, FidelityReport
from specplay.review.build import Review, Table, review_sweep
from specplay.review.summary import flatten_settings, fmt_setting, models_of

_HEADERS = [
    "row",
    "draft acceptance rate",
    "mean acceptance length",
    "tokens/s (median)",
    "log-likelihood per token ± s.e.",
    "distinct-1",
    "distinct-2",
    "mean length",
    "similarity to target-only",
    "TV spent per token",
]


def sweep_review(
    report: FidelityReport, about: Mapping[str, Any], texts: Mapping[int, str], speed_measured: bool
) -> Review:
    """`about`: the report file's header (prompt, backend, settings, created)."""
    settings = [("max_tokens", str(about.get("max_tokens"))), ("drafter", str(report.route))]
    settings += [
        (str(name), fmt_setting(value))
        for name, value in flatten_settings(about.get("settings") or {})
        if name != "rule" and not (name in KNOB_FIELDS and value is None)  # each row has its own
    ]
    table = Table(
        f"Over {len(report.seeds)} seeds",
        _HEADERS,
        [row_cells(row, speed_measured) for row in report.rows],
        "log-likelihood under the target at temperature 1; similarity: normalized Levenshtein over token ids, "
        "mean over the target-only samples (*: the target-only samples to each other, the target's own spread)",
    )
    notes = [f"Created {about.get('created', '?')} by specplay {about.get('specplay_version', '?')} (fidelity sweep)."]
    lanes = report.lanes
    if len(report.rules) > 1:
        matched = report.matched()
        shown = {TARGET_ROW, DRAFT_ROW, *(row.label for row in matched)}
        lanes = {seed: {k: v for k, v in by_row.items() if k in shown} for seed, by_row in lanes.items()}
        points = ", ".join(f"{row.label} ({row.mean_acceptance_length:.2f})" for row in matched)
        notes.append(
            f"Texts: each rule at matched acceptance, its row nearest the highest mean acceptance length every "
            f"rule reaches: {points}. The table has every row."
        )
    return review_sweep(
        title=f"specplay fidelity sweep, drafter {report.route}",
        prompt=str(about.get("prompt", "")),
        notes=notes,
        run_models=models_of(about.get("backend") or {}),
        run_settings=settings,
        lanes_by_seed=lanes,
        tables=[table],
        wall_time_is_speed=speed_measured,
        texts=texts,
    )
