"""What a review shows of one lane: its tokens with their provenance, where it parts from the
target-only text, and rows that line its text up with the target-only text.

Pure data from session records; the page and the Markdown transcript render it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from specplay.engine.events import DraftPosition, RoundEvent, StepEvent
from specplay.engine.speedup import mean_step_ms
from specplay.engine.tree import judged_at
from specplay.store.diff import TokenDiff, token_diff
from specplay.store.format import LaneRecord

Kind = Literal["target", "draft", "speculative"]
"""What a column's lane is: target-only (a reference, where it is the first), draft-only, or speculative."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where one committed token of a speculative lane came from: its round, and the drafted
    position it was judged at (None for a bonus, drawn after the last drafted token)."""

    round: RoundEvent
    slot: int
    """Its index within the round's tokens (engine/tree.judged_at: where it was judged)."""

    @property
    def position(self) -> DraftPosition | None:
        return judged_at(self.round, self.slot)

    @property
    def p_target(self) -> float | None:
        """p_target of the committed token where it was judged or drawn: a drafted position's own
        number, or for a bonus its probability among the recorded top candidates (None if not among them)."""
        if (position := self.position) is not None:
            return position.p_target
        token_id = self.round.tokens[self.slot].token_id
        return next((p for t, p in self.round.bonus_top_target or () if t == token_id), None)


def provenance(lane: LaneRecord) -> list[Provenance | None]:
    """One entry per committed token, in order: its round and slot, or None for a single step."""
    out: list[Provenance | None] = [None] * len(lane.tokens)
    for event in lane.rounds:
        for slot in range(len(event.tokens)):
            if event.token_index + slot < len(out):
                out[event.token_index + slot] = Provenance(event, slot)
    return out


@dataclass(frozen=True, slots=True)
class Divergence:
    """The column against the target-only reference (token_diff(column, reference))."""

    diff: TokenDiff
    changed: frozenset[int]
    """Indices of this column's tokens that the reference does not have at their place."""
    gaps: Mapping[int, tuple[int, int]]
    """Where the reference has tokens this column lacks: before which of its tokens (its length
    for the end), and the reference's [start, end)."""


def divergence(token_ids: Sequence[int], reference: Sequence[int]) -> Divergence:
    """`specplay diff`'s alignment, as marks on this column's tokens."""
    diff = token_diff(token_ids, reference)
    changed: set[int] = set()
    gaps: dict[int, tuple[int, int]] = {}
    for op in diff.opcodes:
        if op.tag in ("replace", "delete"):
            changed.update(range(op.a_start, op.a_end))
        elif op.tag == "insert":
            gaps[op.a_start] = (op.b_start, op.b_end)
    return Divergence(diff, frozenset(changed), gaps)


def segment_starts(texts: Sequence[str], min_sentence_tokens: int = 16) -> list[int]:
    """Where the reference text's rows start: after every line break, and after a sentence end
    once a row holds `min_sentence_tokens` tokens (prose without paragraphs still gets rows)."""
    starts = [0]
    for index, text in enumerate(texts):
        at = index + 1
        if at == len(texts):
            break
        if "\n" in text or (text.rstrip().endswith((".", "!", "?")) and at - starts[-1] >= min_sentence_tokens):
            starts.append(at)
    return starts


def aligned_starts(reference_starts: Sequence[int], column: Divergence | None) -> list[int]:
    """The reference's row starts carried into a column through the alignment: inside equal runs
    token for token, inside a changed run at its start (the change then opens the next row)."""
    if column is None:
        return list(reference_starts)
    out = []
    for start in reference_starts:
        for op in column.diff.opcodes:
            if op.b_start <= start < op.b_end:
                offset = start - op.b_start if op.tag == "equal" else 0
                out.append(min(op.a_start + offset, op.a_end))
                break
        else:
            out.append(column.diff.len_a)
    # The first row holds whatever the column has before the reference's first token; an alignment
    # is monotone, and the guard keeps rows well-formed whatever the opcodes say.
    out[0] = 0
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1])
    return out


@dataclass(frozen=True)
class Column:
    """One lane of one run, as a review shows it."""

    key: str
    """Unique on its page (an HTML id)."""
    title: str
    kind: Kind
    lane: LaneRecord
    texts: Mapping[int, str]
    """Text of every token id the run recorded (for drafted and candidate tokens)."""
    divergence: Divergence | None
    """Against the reference; None for the reference itself, or when there is none."""
    provenance: list[Provenance | None]
    starts: list[int]
    """Where each row of the page starts among this column's tokens."""
    wall_time_is_speed: bool = True
    switches: Mapping[int, str] = field(default_factory=dict)
    """Where the rounds' drafter changed, by token index (LaneRecord.route_switches)."""


def build_columns(
    specs: Sequence[tuple[str, str, Kind, LaneRecord, Mapping[int, str], bool]], reference: LaneRecord | None
) -> list[Column]:
    """Columns from (key, title, kind, lane, texts, wall_time_is_speed), each aligned to `reference`
    (one of the lanes, or None) so that their rows line up."""
    ref_starts = segment_starts(reference.texts) if reference is not None and reference.tokens else [0]
    columns = []
    for key, title, kind, lane, texts, speed in specs:
        against = None if reference is None or lane is reference else divergence(lane.token_ids, reference.token_ids)
        starts = aligned_starts(ref_starts, against) if reference is not None else [0]
        column = Column(
            key=key,
            title=title,
            kind=kind,
            lane=lane,
            texts=texts,
            divergence=against,
            provenance=provenance(lane),
            starts=starts,
            wall_time_is_speed=speed,
            switches=lane.route_switches,
        )
        columns.append(column)
    return columns


def step_times_ms(lane: LaneRecord) -> list[tuple[int, float]]:
    """(tokens so far, milliseconds so far) after every round or step, from the events' own times."""
    out, tokens, elapsed_ms = [], 0, 0.0
    for event in lane.events:
        if isinstance(event, RoundEvent):
            tokens += len(event.tokens)
            elapsed_ms += event.draft_ms + event.verify_ms + event.overhead_ms
        elif isinstance(event, StepEvent):
            tokens += 1
            elapsed_ms += event.step_ms
        else:
            continue
        out.append((tokens, elapsed_ms))
    return out


def target_step_ms(lane: LaneRecord) -> float | None:
    """A target-only lane's mean step time: the yardstick the playground predicts with."""
    steps = [event.step_ms for event in lane.events if isinstance(event, StepEvent)]
    return mean_step_ms(sum(steps), len(steps))
