"""A fidelity sweep as a review: its table over all seeds, then each seed's texts side by side
(target-only, draft-only, one column per TV budget), aligned to that seed's target-only text.
A sweep of several rules shows, beside the references, one column per rule at matched acceptance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from specplay.engine.rules import KNOB_FIELDS
from specplay.fidelity.cells import row_cells
from specplay.fidelity.conversation import FidelityTurn
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
    report: FidelityReport,
    about: Mapping[str, Any],
    texts: Mapping[int, str],
    speed_measured: bool,
    key_prefix: str = "",
) -> Review:
    """`about`: the report file's header (prompt, backend, settings, created); `key_prefix`, see
    review_sweep."""
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
        key_prefix=key_prefix,
    )


def conversation_review(
    turns: Sequence[tuple[FidelityTurn, FidelityReport]],
    total: int,
    about: Mapping[str, Any],
    texts: Mapping[int, str],
    speed_measured: bool,
) -> Review:
    """A sweep of a conversation's turns (of `total`): per turn its prompt and its table over the
    seeds, then each seed's texts; what was compared (`about["compared"]`) first."""
    groups, column_settings, turn_notes = [], {}, []
    for turn, report in turns:
        page = sweep_review(report, about, texts, speed_measured, key_prefix=f"t{turn.index}")
        heading = f"Turn {turn.index + 1} of {total}"
        before = "turn 1" if turn.index == 1 else f"turns 1 to {turn.index}"
        asked = f"every row asked after the session's {turn.lane} lane's {before} (its prompts and answers)"
        tables = [
            replace(
                table,
                title=f"{heading}, {table.title[0].lower()}{table.title[1:]}",
                caption=f"{table.caption}; {asked if turn.earlier else 'the first turn, asked alone'}",
            )
            for table in page.tables
        ]
        for i, group in enumerate(page.groups):
            first = i == 0  # the turn's prompt and its numbers open its first seed's texts
            groups.append(
                replace(
                    group,
                    title=f"{heading} · {group.title}",
                    prompt=turn.prompt if first else None,
                    tables=tables if first else [],
                )
            )
        column_settings |= page.column_settings
        turn_notes.append((heading, page.notes[1:]))  # past the shared origin line
    # A note every turn has (sampled, matched acceptance) is said once; another, with its turn.
    everywhere = [note for note in turn_notes[0][1] if all(note in notes for _, notes in turn_notes)]
    notes = everywhere + [
        f"{heading}: {note}" for heading, notes in turn_notes for note in notes if note not in everywhere
    ]
    (_, first_report), *_ = turns
    head = sweep_review(first_report, about, {}, speed_measured)
    return replace(
        head,
        title=f"specplay fidelity sweep of session {about.get('session', '?')}, turn by turn",
        notes=[head.notes[0], str(about.get("compared", "")), *notes],
        column_settings=column_settings,
        groups=groups,
        tables=[],
    )
