"""Token-level comparison of two generations, and when a difference is a bug.

A lossless greedy speculative run (temperature 0, a rule that is then lossless) must equal greedy target-only
decoding token for token, so any divergence from its target-only lane is a violation: of the
acceptance rule, or of numerics (the verify pass and single steps disagreeing on an argmax).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz.distance import Levenshtein

from specplay.engine.settings import SpecSettings
from specplay.store.changes import lane_settings
from specplay.store.format import LaneRecord

OpTag = Literal["equal", "insert", "delete", "replace"]


@dataclass(frozen=True, slots=True)
class Opcode:
    """Turn a[a_start:a_end] into b[b_start:b_end]."""

    tag: OpTag
    a_start: int
    a_end: int
    b_start: int
    b_end: int


@dataclass(frozen=True, slots=True)
class TokenDiff:
    opcodes: tuple[Opcode, ...]
    """Levenshtein alignment of a onto b, covering both sequences in order."""
    similarity: float
    """Normalized Levenshtein similarity: 1 - distance / max(len(a), len(b)); 1.0 is identical."""
    first_divergence: int | None
    """Index of the first position where a and b differ (or one ends); None if identical."""
    len_a: int
    len_b: int

    @property
    def identical(self) -> bool:
        return self.first_divergence is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "similarity": self.similarity,
            "first_divergence": self.first_divergence,
            "num_tokens_a": self.len_a,
            "num_tokens_b": self.len_b,
            "opcodes": [
                {"tag": op.tag, "a_start": op.a_start, "a_end": op.a_end, "b_start": op.b_start, "b_end": op.b_end}
                for op in self.opcodes
            ],
        }


def token_diff(a: Sequence[int], b: Sequence[int]) -> TokenDiff:
    a, b = list(a), list(b)
    opcodes = tuple(
        Opcode(op.tag, op.src_start, op.src_end, op.dest_start, op.dest_end) for op in Levenshtein.opcodes(a, b)
    )
    return TokenDiff(opcodes, Levenshtein.normalized_similarity(a, b), first_divergence(a, b), len(a), len(b))


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    # Read off the sequences, not the opcodes: an optimal alignment may match a later repeat of
    # a token and so start its first edit before the true first difference.
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def is_lossless_greedy(settings: SpecSettings) -> bool:
    """Settings under which the output must equal greedy target-only decoding."""
    return settings.sampling.greedy and settings.acceptance_rule.lossless_when_greedy


def lossy_from(lane: LaneRecord) -> int | None:
    """The token index from which a live change (a temperature above 0, a relaxed rule) made the lane lossy."""
    for change, after in lane_settings(lane):
        if not is_lossless_greedy(after.settings):
            return change.token_index
    return None


def _cut_short(lane: LaneRecord) -> bool:
    return lane.done is None or lane.done.finish_reason == "cancelled"


def violation(main: LaneRecord, baseline: LaneRecord, diff: TokenDiff) -> int | None:
    """The token at which a lossless greedy lane left its target-only baseline, if it did.

    `diff` is token_diff(main.token_ids, baseline.token_ids). Divergence after a live change to a
    lossy setting is expected, and so is one lane simply ending early because it was cut short.
    """
    at = diff.first_divergence
    if at is None or not is_lossless_greedy(main.settings):
        return None
    lossy = lossy_from(main)
    if lossy is not None and at >= lossy:
        return None
    shorter = main if diff.len_a < diff.len_b else baseline
    if at == min(diff.len_a, diff.len_b) and _cut_short(shorter):
        return None
    return at


@dataclass(frozen=True)
class TurnComparison:
    """Turn `turn` of one conversation against the same turn of another (or of its own target-only lane)."""

    turn: int
    """0 for the first, as the session file counts."""
    prompt_a: str | None
    """None where A has no such turn."""
    prompt_b: str | None
    lane_a: LaneRecord | None
    """None where the side has no such turn, or no answer to it (a run cut short first)."""
    lane_b: LaneRecord | None
    diff: TokenDiff | None
    """None unless both sides answered the turn."""
    same_earlier_turns: bool
    """Every earlier turn was asked alike and answered with the same tokens on both sides. Each
    side continues its own conversation, so once they part, every later turn is asked after
    different text and promises no equal output."""
    checked: bool
    """Whether this turn promises equality: a lossless greedy lane against its own target-only
    lane, after the same earlier turns."""
    violation: int | None

    @property
    def same_prompt(self) -> bool:
        return self.prompt_a == self.prompt_b

    @property
    def identical(self) -> bool:
        return self.diff is not None and self.diff.identical and self.same_prompt


Side = Sequence[tuple[str, LaneRecord | None]]
"""A conversation's turns as (prompt, the lane that answered it)."""


def compare_turns(a: Side, b: Side, own_baseline: bool) -> list[TurnComparison]:
    """Turn i of `a` against turn i of `b`, for every turn either has. `own_baseline`: `b` is
    `a`'s own target-only lane, run with the same prompts, models, seed and settings, so a
    lossless greedy turn asked after the same earlier turns must equal it."""
    out: list[TurnComparison] = []
    for turn in range(max(len(a), len(b))):
        prompt_a, lane_a = a[turn] if turn < len(a) else (None, None)
        prompt_b, lane_b = b[turn] if turn < len(b) else (None, None)
        same_before = all(earlier.identical for earlier in out)
        diff, checked, broken_at = None, False, None
        if lane_a is not None and lane_b is not None:
            diff = token_diff(lane_a.token_ids, lane_b.token_ids)
            checked = own_baseline and same_before and is_lossless_greedy(lane_a.settings)
            broken_at = violation(lane_a, lane_b, diff) if checked else None
        out.append(
            TurnComparison(
                turn=turn,
                prompt_a=prompt_a,
                prompt_b=prompt_b,
                lane_a=lane_a,
                lane_b=lane_b,
                diff=diff,
                same_earlier_turns=same_before,
                checked=checked,
                violation=broken_at,
            )
        )
    return out
