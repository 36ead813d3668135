"""A fidelity sweep as a review: its table over all seeds, then each seed's texts side by side
(target-only, draft-only, one column per TV budget), aligned to that seed's target-only text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specplay.fidelity.measure import FidelityReport, FidelityRow
from specplay.review.build import Review, Table, review_sweep
from specplay.review.summary import fmt_setting

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


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cells(row: FidelityRow, speed_measured: bool) -> list[str]:
    tokens_per_s = row.tokens_per_s if speed_measured or row.mode != "speculative" else None
    ll = _num(row.log_likelihood_per_token, 2)
    if row.log_likelihood_se is not None:
        ll += f" ± {row.log_likelihood_se:.2f}"
    return [
        row.label,
        _num(row.draft_acceptance_rate, 2),
        _num(row.mean_acceptance_length, 2),
        _num(tokens_per_s, 1),
        ll,
        _num(row.distinct_1, 2),
        _num(row.distinct_2, 2),
        _num(row.mean_length, 1),
        _num(row.similarity_to_target, 2),
        _num(row.tv_spent_per_token, 3),
    ]


def sweep_review(
    report: FidelityReport, about: Mapping[str, Any], texts: Mapping[int, str], speed_measured: bool
) -> Review:
    """`about`: the report file's header (prompt, backend, settings, created)."""
    backend = about.get("backend") or {}
    models = [
        (str(name), str(identity.get("source", "?")), str(identity.get("weights_sha256", ""))[:12] or "-")
        for name, identity in (backend.get("models") or {}).items()
    ]
    settings = [("max_tokens", str(about.get("max_tokens"))), ("drafter", str(report.route))]
    for name, value in (about.get("settings") or {}).items():
        if isinstance(value, dict):
            settings += [(str(k), fmt_setting(v)) for k, v in value.items()]
        elif name != "tv_budget":  # each row has its own
            settings.append((str(name), fmt_setting(value)))
    table = Table(
        f"Over {len(report.seeds)} seeds",
        _HEADERS,
        [_cells(row, speed_measured) for row in report.rows],
        "log-likelihood under the target at temperature 1; similarity: normalized Levenshtein over token ids, "
        "mean over the target-only samples",
    )
    notes = [f"Created {about.get('created', '?')} by specplay {about.get('specplay_version', '?')} (fidelity sweep)."]
    return review_sweep(
        f"specplay fidelity sweep, drafter {report.route}",
        str(about.get("prompt", "")),
        notes,
        models,
        settings,
        report.lanes,
        [table],
        speed_measured,
        texts,
    )
