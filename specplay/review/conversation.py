"""The whole conversation's numbers for a review: each column's turns taken together.

A column of a conversation review is one lane of one run, answering every turn; its turns sit in
the turn groups under one slot (the run and the lane). Counts add up over the turns, rates are
taken over everything the turns did, and the texts are compared joined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rapidfuzz.distance import Levenshtein

from specplay.engine.disturbance import turns_disturbance
from specplay.engine.speedup import draft_acceptance_rate, mean_acceptance_length, measured_speedup
from specplay.review.columns import Column
from specplay.review.summary import ColumnNumbers, summary_cells
from specplay.store.format import LaneRecord

if TYPE_CHECKING:
    from specplay.review.build import Group

CAPTION = (
    "Over every turn: tokens and TV spent add up; acceptance and mean acceptance length are taken over "
    "all the rounds of the turns that finished; tokens/s counts each turn's tokens at that turn's rate "
    "(all tokens over the sum of tokens ÷ tokens/s), and the measured speedup divides it by the run's own "
    "target-only lane's, taken the same way; similarity compares the turns' answers joined. Each turn has "
    "its own predicted speedup."
)
CONTINUES_NOTE = (
    "Each lane continues its own conversation: after a turn where a text parts from the target-only one, "
    "the later turns are asked after different earlier answers, so a later difference is not all that turn's."
)


def conversation_tokens_per_s(lanes: Sequence[LaneRecord]) -> float | None:
    """The lanes' tokens over the time their turns took at their own rates; turns without a rate
    (a single token) are left out of both."""
    timed = [(len(lane.tokens), rate) for lane in lanes if (rate := lane.metrics.get("tokens_per_s"))]
    seconds = sum(tokens / rate for tokens, rate in timed)
    return sum(tokens for tokens, _ in timed) / seconds if seconds > 0 else None


def _total(lanes: Sequence[LaneRecord], metric: str) -> float:
    return sum(lane.metrics.get(metric) or 0 for lane in lanes)


def _first_divergence(columns: Sequence[tuple[int, Column]]) -> str:
    """Where the column first parts from the target-only text: its turn and token."""
    if any(column.divergence is None for _, column in columns):
        return "-"
    for turn, column in columns:
        at = column.divergence.diff.first_divergence if column.divergence is not None else None
        if at is not None:
            return f"turn {turn + 1}, token {at}"
    return "none"


def _numbers(
    columns: Sequence[tuple[int, Column]],
    references: Mapping[int, Column],
    baselines: Sequence[LaneRecord],
) -> ColumnNumbers:
    lanes = [column.lane for _, column in columns]
    head = columns[0][1]
    speculative = head.kind == "speculative"
    speed = all(column.wall_time_is_speed for _, column in columns)
    tokens_per_s = conversation_tokens_per_s(lanes) if speed else None
    measured = disturbed = None
    if speculative and speed:
        yardstick = baselines or [references[turn].lane for turn, _ in columns if turn in references]
        if yardstick and all(references[turn].wall_time_is_speed for turn, _ in columns if turn in references):
            measured = measured_speedup(tokens_per_s, conversation_tokens_per_s(yardstick))
        if measured is not None:
            disturbed = _disturbed(columns, baselines, references)
    accepted = _total(lanes, "num_accepted_draft_tokens")
    similarity = None
    if all(column.divergence is not None for _, column in columns):
        joined = [t for _, column in columns for t in column.lane.token_ids]
        reference = [t for turn, _ in columns for t in references[turn].lane.token_ids]
        similarity = Levenshtein.normalized_similarity(joined, reference)
    elif all(column is references.get(turn) for turn, column in columns):
        similarity = 1.0
    return ColumnNumbers(
        tokens=sum(len(lane.tokens) for lane in lanes),
        draft_acceptance_rate=draft_acceptance_rate(accepted, _total(lanes, "num_draft_tokens"))
        if speculative
        else None,
        mean_acceptance_length=mean_acceptance_length(accepted, _total(lanes, "num_spec_steps"))
        if speculative
        else None,
        tokens_per_s=tokens_per_s,
        measured_speedup=measured,
        predicted_speedup=None,
        tv_spent=_total(lanes, "tv_spent") if speculative else None,
        similarity=similarity,
        first_divergence=None,
        disturbed_reason=disturbed,
    )


def _disturbed(
    columns: Sequence[tuple[int, Column]], baselines: Sequence[LaneRecord], references: Mapping[int, Column]
) -> str | None:
    """Why the whole conversation's measured speedup is disturbed: each turn's where its lane's or
    its yardstick's timings drifted (`speedup_disturbance`), named by its turn. The yardstick is
    as `_numbers` takes it: the run's own target-only lanes, else each turn's reference."""
    against = dict(zip((turn for turn, _ in columns), baselines, strict=True)) if baselines else {}
    against = against or {turn: column.lane for turn, column in references.items()}
    turns = ((turn + 1, column.lane.metrics, against[turn].metrics) for turn, column in columns if turn in against)
    return turns_disturbance(turns)


def conversation_rows(groups: Sequence[Group], slots: Mapping[str, str]) -> list[list[str]]:
    """The summary row (SUMMARY_HEADERS) of each slot over the turns; `groups`: one per turn, in
    order; `slots`: column key to the run and lane the column shows."""
    by_slot: dict[str, list[tuple[int, Column]]] = {}
    references = {turn: group.reference for turn, group in enumerate(groups) if group.reference is not None}
    baselines: dict[str, list[LaneRecord]] = {}
    for turn, group in enumerate(groups):
        for column in group.columns:
            slot = slots[column.key]
            by_slot.setdefault(slot, []).append((turn, column))
            if column.key in group.baselines:
                baselines.setdefault(slot, []).append(group.baselines[column.key])
    rows = []
    for slot, columns in by_slot.items():
        # A run's own target-only lanes are the yardstick only where every turn had one.
        own = baselines.get(slot, [])
        numbers = _numbers(columns, references, own if len(own) == len(columns) else [])
        head = columns[0][1]
        cells = summary_cells(head, numbers)
        cells[0] = head.title.removesuffix(" (incomplete)")
        cells[-1] = _first_divergence(columns)
        rows.append(cells)
    return rows


def parted_before_the_last_turn(groups: Sequence[Group]) -> bool:
    """Whether some text parts from its turn's target-only text before the last turn: the later
    turns were then asked after different earlier answers."""
    return any(
        column.divergence is not None and not column.divergence.diff.identical
        for group in groups[:-1]
        for column in group.columns
    )
