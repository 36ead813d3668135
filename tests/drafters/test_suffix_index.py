"""The suffix index (drafters/suffix_index.py) held to brute force: on random token sequences, for
many queries, the longest suffix match with a continuation, every continuation's count, their
order (most frequent first, ties to the latest occurrence) and where the latest occurrence lies,
whether the index was built in bulk, grown sequence by sequence or token by token."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from specplay.drafters import suffix_index
from specplay.drafters.suffix_index import SuffixIndex

Continuations = list[tuple[int, int, int]]
"""(token, count, latest end position), most frequent first, ties to the latest."""


def reference(sequences: Sequence[Sequence[int]], context: Sequence[int], most: int) -> tuple[int, Continuations]:
    """The longest p <= most such that context[-p:] occurs somewhere followed by a token, and the
    tokens that followed it, by scanning every position."""
    starts = [sum(len(s) for s in sequences[:i]) for i in range(len(sequences))]
    for p in range(min(most, len(context)), 0, -1):
        pattern = list(context[-p:])
        found: dict[int, tuple[int, int]] = {}
        for start, sequence in zip(starts, sequences, strict=True):
            for i in range(len(sequence) - p):
                if list(sequence[i : i + p]) == pattern:
                    token, position = sequence[i + p], start + i + p
                    count, latest = found.get(token, (0, -1))
                    found[token] = (count + 1, max(latest, position))
        if found:
            ranked = sorted(((t, c, at) for t, (c, at) in found.items()), key=lambda x: (-x[1], -x[2]))
            return p, ranked
    return 0, []


def answered(index: SuffixIndex, state: int) -> Continuations:
    """What the index says followed a match (nothing where nothing matched: the root)."""
    if state == 0:
        return []
    children, total = index.ranked(state)
    assert total == sum(count for _, _, count in children)
    return [(token, count, index.latest[child]) for token, child, count in children]


def random_sequences(rng: random.Random, count: int, vocab: int, longest: int) -> list[list[int]]:
    """Small vocabularies, so contexts repeat and branch; some sequences copy a stretch of an
    earlier one (as a repeated task's output does)."""
    out: list[list[int]] = []
    for _ in range(count):
        sequence = [rng.randrange(vocab) for _ in range(rng.randrange(0, longest))]
        if out and rng.random() < 0.5:
            source = rng.choice(out)
            at = rng.randrange(len(source) + 1)
            sequence[rng.randrange(len(sequence) + 1) :] = source[at : at + rng.randrange(1, 30)]
        out.append(sequence)
    return out


def built_three_ways(sequences: list[list[int]]) -> list[SuffixIndex]:
    bulk = SuffixIndex.built(sequences)
    whole = SuffixIndex()
    for sequence in sequences:
        whole.add(sequence)
    half = SuffixIndex.built(sequences[: len(sequences) // 2])  # a bulk build then grown: the memory's life
    for sequence in sequences[len(sequences) // 2 :]:
        half.open()
        for token in sequence:
            half.append(token)
    return [bulk, whole, half]


@pytest.mark.parametrize("seed", range(12))
def test_the_longest_match_and_its_continuations_are_brute_forces(seed: int) -> None:
    rng = random.Random(seed)
    vocab = [2, 3, 5, 8][seed % 4]
    sequences = random_sequences(rng, rng.randrange(1, 8), vocab, 60)
    indexes = built_three_ways(sequences)
    for _ in range(150):
        if rng.random() < 0.5 and any(sequences):  # a context that ends like some stretch, then strays
            source = rng.choice([s for s in sequences if s])
            end = rng.randrange(1, len(source) + 1)
            context = source[max(0, end - rng.randrange(1, 20)) : end] + [rng.randrange(vocab)] * rng.randrange(2)
        else:
            context = [rng.randrange(vocab) for _ in range(rng.randrange(0, 12))]
        most = rng.randrange(1, 10)
        expected_length, expected = reference(sequences, context, most)
        for index in indexes:
            state, length = index.match(context[-most:])
            assert length == expected_length, (sequences, context, most)
            assert answered(index, state) == expected
            if length:
                sequence, offset = index.where(state)
                assert list(sequences[sequence][offset - length + 1 : offset + 1]) == list(context[-length:])


@pytest.mark.parametrize("seed", range(8))
def test_a_growing_request_matches_its_own_earlier_tokens(seed: int) -> None:
    """The open sequence holds a request's tokens but the last: its last token's longest suffix
    that occurred earlier with a token after it, and the counts of what followed."""
    rng = random.Random(100 + seed)
    vocab = [2, 3, 4, 6][seed % 4]
    tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 200))]
    index = SuffixIndex()
    index.open()
    for n in range(1, len(tokens) + 1):
        # The index holds tokens[:n - 1]; the context is tokens[:n].
        most = rng.randrange(1, 12)
        state, length = index.match_open(tokens[n - 1], most)
        expected_length, expected = reference([tokens[: n - 1]], tokens[:n], most)
        assert length == expected_length, (tokens[:n], most)
        assert answered(index, state) == expected
        index.append(tokens[n - 1])


def test_counts_stay_exact_through_clones_across_sequences() -> None:
    """Sequences sharing prefixes (the generalized construction's existing-state cases)."""
    sequences = [[1, 2, 3], [1, 2, 3], [1, 2], [2, 3, 1, 2, 3, 4], [3], []]
    for index in built_three_ways(sequences):
        for context in ([1, 2], [2], [3], [1], [2, 3], [9, 1, 2, 3]):
            expected_length, expected = reference(sequences, context, 8)
            state, length = index.match(context)
            assert (length, answered(index, state)) == (expected_length, expected)
    index = SuffixIndex.built(sequences)
    assert index.sequences == 6 and index.tokens == sum(map(len, sequences))


def test_a_bulk_build_counts_alike_by_length_or_state_by_state(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    sequences = random_sequences(rng, 6, 4, 300)
    by_length = SuffixIndex.built(sequences)
    monkeypatch.setattr(suffix_index, "BUCKETS_MAX", 0)  # as a single output of thousands of tokens is
    one_by_one = SuffixIndex.built(sequences)
    assert (by_length.count, by_length.latest) == (one_by_one.count, one_by_one.latest)
    grown = SuffixIndex()
    for sequence in sequences:
        grown.add(sequence)
    # Grown token by token the states are the same ones, counted alike (the root, no match, aside).
    assert sorted(zip(grown.length[1:], grown.count[1:], strict=True)) == sorted(
        zip(by_length.length[1:], by_length.count[1:], strict=True)
    )
