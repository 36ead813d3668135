"""The suffix drafter kind (drafters/suffix.py) without a model: how it is written and recorded,
what it drafts from a match (the length the match earns, the probability floor, trees of the other
continuations by count), which index wins, what it says of the draft's origin, and its memory of
earlier outputs (what it reads, what it keeps, what it forgets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specplay.drafters import KINDS, SUFFIX, EarlierOutput, EarlierOutputs, drafter_syntax, kind_of, parse_model
from specplay.drafters.suffix import SuffixMemory, SuffixParams
from specplay.engine.layout import ROOT, children, depths
from specplay.engine.tree import TreeShape, tree_shape
from specplay.errors import ConfigError


def memory(outputs: list[list[int]], **options: object) -> SuffixMemory:
    earlier = EarlierOutputs(
        folder=Path("sessions"),
        outputs=tuple(EarlierOutput(tuple(o), f"session s{i}") for i, o in enumerate(outputs)),
        sessions=len(outputs),
    )
    return SuffixMemory(SuffixParams(**options), earlier)  # type: ignore[arg-type]


def test_it_is_written_checked_and_recorded_as_every_kind() -> None:
    drafter = parse_model("mem", "drafter", "suffix:depth=8,min_prob=0.2,memory=5000", "draft")
    assert kind_of(drafter) is SUFFIX and KINDS["suffix"] is SUFFIX and "suffix[:" in drafter_syntax()
    assert drafter.params == {"depth": 8, "factor": 1.0, "offset": 0.0, "min_prob": 0.2, "memory": 5000}
    assert SUFFIX.describe(drafter) == "suffix decoding, matches up to 8 tokens, memory 5,000 tokens"
    record = SUFFIX.record(drafter)
    assert record["kind"] == "suffix" and SUFFIX.replay("mem", "drafter", record) == drafter
    assert SUFFIX.matches(drafter, record) and not SUFFIX.matches(drafter, record | {"depth": 9})
    assert SUFFIX.recalls(drafter) == 5000 and SUFFIX.recalls(parse_model("m", "drafter", "suffix:memory=0", "d")) == 0
    assert parse_model("m", "drafter", "suffix", "draft").params["depth"] == 24


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("suffix:size=3", "suffix takes depth=, factor=, offset=, min_prob=, memory=, not size"),
        ("suffix:depth=0", "suffix:depth=0 must be a whole number from 1 to 256"),
        ("suffix:depth=two", "suffix:depth=two must be a whole number from 1 to 256"),
        ("suffix:min_prob=1.5", "suffix:min_prob=1.5 must be a number from 0 to 1"),
        ("suffix:min_prob=nan", "suffix:min_prob=nan must be a number from 0 to 1"),
        ("suffix:memory=-1", "suffix:memory=-1 must be a whole number from 0 to 1,000,000"),
        ("suffix:factor=0,offset=0", "give factor or offset above 0"),
        ("suffix:depth", "suffix takes KEY=VALUE options separated by commas"),
    ],
)
def test_bad_options_are_one_line(written: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace("+", r"\+")) as raised:
        parse_model("mem", "drafter", written, "draft")
    assert "\n" not in str(raised.value)


def chain(proposer: object, tokens: list[int], k: int = 8) -> list[int]:
    return proposer.propose(tokens, k)  # type: ignore[attr-defined]


def test_a_match_earns_factor_times_its_length_plus_offset_tokens() -> None:
    output = list(range(100, 140))
    context = [1, 2, *output[:3]]  # matches 3 tokens of the earlier output
    assert chain(memory([output]).open(), context) == output[3:6]  # factor 1: three tokens
    assert chain(memory([output], factor=2.0).open(), context) == output[3:9]
    assert chain(memory([output], factor=0.5, offset=1.0).open(), context) == output[3:5]
    assert chain(memory([output], factor=2.0).open(), context, k=4) == output[3:7]  # the round's k first
    assert chain(memory([output], depth=2, factor=4.0).open(), context) == output[3:11]  # matched 2, capped by depth


def test_drafting_stops_below_the_probability_floor() -> None:
    # After [5, 6] came 7 three times out of four, then 8 and 9 (distinct outputs: each counts).
    outputs = [[1, 5, 6, 7, 8, 9], [2, 5, 6, 7, 8, 9], [3, 5, 6, 7, 8, 9], [4, 5, 6, 1, 2, 3]]
    assert chain(memory(outputs, factor=4.0).open(), [0, 5, 6]) == [7, 8, 9]  # 0.75, 0.75, 0.75
    assert chain(memory(outputs, factor=4.0, min_prob=0.8).open(), [0, 5, 6]) == []
    assert chain(memory(outputs[2:], factor=4.0, min_prob=0.6).open(), [0, 5, 6]) == []  # 0.5 each
    assert chain(memory(outputs[2:], factor=4.0, min_prob=0.5).open(), [0, 5, 6]) == [1, 2, 3]  # ties: the latest


def test_a_tree_branches_into_the_other_continuations_by_count() -> None:
    outputs = [[1, 5, 6, 7, 8], [2, 5, 6, 7, 8], [5, 6, 7, 9], [5, 6, 3, 4]]
    proposer = memory(outputs, factor=3.0).open()
    proposal = proposer.draft([0, 5, 6], tree_shape(width=3, nodes=0, k=3))
    drafted = dict(zip(range(len(proposal.tokens)), proposal.tokens, strict=True))
    rows = children(proposal.parents)
    # Root: 7 (3 of 4), then 3 (1 of 4); under 7: 8 (2 of 3), 9 (1 of 3); under 3: 4.
    assert [drafted[n] for n in rows[0]] == [7, 3]
    seven, three = rows[0]
    assert [drafted[n] for n in rows[seven + 1]] == [8, 9] and [drafted[n] for n in rows[three + 1]] == [4]
    assert max(depths(proposal.parents)) == 2  # the third level had nothing after it
    assert proposal.parents[0] == ROOT and all(p < n for n, p in enumerate(proposal.parents))
    # Width 1: the chain of the most frequent continuations; nodes bound the tree.
    assert proposer.draft([0, 5, 6], TreeShape(width=1, nodes=3, depth=3)).tokens == (7, 8)
    assert len(proposer.draft([0, 5, 6], TreeShape(width=3, nodes=2, depth=3)).tokens) == 2


def test_the_draft_says_where_it_came_from() -> None:
    remembered = memory([[1, 2, 3, 4, 5, 6, 7]])
    proposer = remembered.open()
    proposal = proposer.draft([9, 2, 3, 4], TreeShape(width=1, nodes=4, depth=4))
    assert proposal.tokens == (5, 6, 7)
    assert proposal.origin == "matched 3 tokens of session s0; the first drafted token followed it 1 of 1 times"
    # The request itself: [8, 9, 8] -> 9 followed 8 once, in this request.
    own = memory([], memory=0).open().draft([8, 9, 8], TreeShape(width=1, nodes=4, depth=4))
    assert own.tokens == (9,) and own.origin is not None and "of this request" in own.origin


def test_the_better_draft_of_request_and_memory_wins() -> None:
    """The request saw [1, 2] followed by 3 once and by 8 once (each half its continuations); the
    memory saw [1, 2, 4, 5, 6] twice: its draft is worth more. Alone, the request's wins."""
    context = [1, 2, 3, 1, 2, 8, 1, 2]
    remembered = memory([[1, 2, 4, 5, 6], [7, 1, 2, 4, 5, 6]], factor=3.0)
    proposal = remembered.open().draft(context, TreeShape(width=1, nodes=4, depth=4))
    assert proposal.tokens == (4, 5, 6) and proposal.origin is not None and "session s1" in proposal.origin
    alone = memory([], factor=3.0).open().draft(context, TreeShape(width=1, nodes=4, depth=4))
    assert alone.tokens == (8, 1) and alone.origin is not None and "this request" in alone.origin


def test_memory_keeps_the_newest_within_its_size_and_each_output_once() -> None:
    outputs = [[i, i + 1, i + 2, i + 3] for i in range(0, 40, 4)]  # ten outputs of four tokens
    kept = memory(outputs, memory=10)
    assert kept.tokens == 10  # the two newest whole, and the last two tokens of the one before
    assert "memory of 10 tokens: it read 40 tokens of 10 earlier outputs from 10 sessions" in kept.note
    kept.remember([36, 37, 38, 39])  # already held: nothing changes
    assert kept.tokens == 10 and kept.runs == 0
    kept.remember([50, 51])
    # Past its size it forgets the oldest, down to three quarters of it, and indexes afresh.
    assert kept.runs == 1 and kept.tokens <= 10 and chain(kept.open(), [7, 50], k=1) == [51]
    assert chain(kept.open(), [7, 37], k=1) == [38]
    assert "an output of this process (its 1st)" in str(kept.open().draft([0, 50], TreeShape(1, 1, 1)).origin)


def test_nothing_read_and_memory_off_say_so() -> None:
    assert SuffixMemory(SuffixParams(), None).note == "no sessions read: it remembers this process's outputs"
    off = memory([[1, 2, 3]], memory=0)
    assert off.note.startswith("memory off") and off.tokens == 0
    off.remember([1, 2, 3])
    assert off.tokens == 0
    empty = memory([])
    assert empty.note.startswith("memory of 0 tokens: it found no earlier outputs of this target in sessions")


def test_a_conversations_next_turn_that_parts_earlier_is_indexed_again() -> None:
    proposer = memory([]).open()
    proposer.extend([1, 2, 3, 1, 2], 5)
    assert proposer.length == 5 and chain(proposer, [1, 2, 3, 1, 2, 3, 1]) == [2, 3]
    proposer.extend([4, 5], 1)  # a shorter list than indexed: another sequence
    assert proposer.length == 1 and chain(proposer, [4, 5, 4]) == [5]
    assert chain(proposer, [4, 5, 4, 1, 2]) == []  # what the first sequence held is gone
