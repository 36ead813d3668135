"""The index suffix decoding drafts from: a suffix automaton over token sequences, with counts.

A suffix automaton (Blumer et al. 1985) is the smallest automaton that accepts every substring of
its sequences; each state is a class of substrings that end at the same positions (`endpos`), so
one state answers for all of them. What suffix decoding asks of it, each in a few dictionary reads:

- the longest suffix of a context that occurs in the sequences with a token after it (`match`):
  the context's last tokens walked through the automaton, falling back along suffix links;
- how often each token followed it (`ranked`): the occurrences of `s + c` are the end positions
  of the state reached from s's by c, so each child's `count` is a continuation count;
- the most frequent continuation and the others, by count (ties to the latest occurrence);
- where an occurrence lies (`where`): the latest end position each state saw.

Sequences are added whole (`add`: earlier outputs) or token by token (`append`: the current
request as it grows); counts are kept exact as they come, and a bulk build (`built`) counts once
at the end. Plain Python lists and dicts: a proposal is a handful of reads, however large the
memory; a build is linear in its tokens.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

import numpy as np

Child = tuple[int, int, int]
"""(token, the state after it, how many times it followed)."""
BUCKETS_MAX = 4096
"""Counting up a bulk build by length takes a numpy call per length: past this many lengths (one
output of thousands of tokens), state by state is quicker."""


class SuffixIndex:
    """A generalized suffix automaton over token sequences, every state with its occurrences."""

    def __init__(self) -> None:
        self.length: list[int] = [0]
        """The longest substring of each state's class."""
        self.link: list[int] = [-1]
        """Each state's suffix link: the state of the longest suffix outside its class (root: -1)."""
        self.next: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
        """Occurrences (end positions) of each state's substrings."""
        self.latest: list[int] = [-1]
        """The latest end position among them (a position counts tokens over every sequence)."""
        self.starts: list[int] = []
        """Each sequence's first position."""
        self.tokens = 0
        """Positions taken in: the tokens of every sequence."""
        self.version = 0
        """Bumped by every change, so cached rankings of states know they are stale."""
        self._last = 0
        """The state of the open sequence's whole prefix (where the next token is appended)."""
        self._ranked: dict[int, tuple[list[Child], int]] = {}
        self._ranked_version = 0
        self._counting = True
        """Counts kept as tokens come (False during a bulk build, which counts at the end)."""

    @classmethod
    def built(cls, sequences: Iterable[Sequence[int]]) -> SuffixIndex:
        """An index over `sequences`, built in one pass and counted once at the end."""
        index = cls()
        index._counting = False
        for sequence in sequences:
            index._begin()
            for token in sequence:
                index._insert(token)
                index.count[index._last] += 1
                index.latest[index._last] = index.tokens
                index.tokens += 1
        index._count_up()
        index._counting = True
        return index

    @property
    def sequences(self) -> int:
        return len(self.starts)

    def add(self, sequence: Sequence[int]) -> None:
        """A whole sequence, counted as it goes."""
        self._begin()
        for token in sequence:
            self.append(token)

    def open(self) -> None:
        """Start a sequence that `append` then grows."""
        self._begin()

    def append(self, token: int) -> None:
        """One more token of the open sequence; every suffix it ends gains an occurrence."""
        self._insert(token)
        position, count, latest, link = self.tokens, self.count, self.latest, self.link
        state = self._last
        while state > 0:
            count[state] += 1
            latest[state] = position
            state = link[state]
        self.tokens += 1

    def match(self, context: Sequence[int]) -> tuple[int, int]:
        """(state, length) of the longest suffix of `context` that occurs with a token after it
        somewhere in the sequences; (0, 0) where none does. Walk only the last tokens a match may
        span: the work grows with `context`."""
        nexts, link, length = self.next, self.link, self.length
        state = matched = 0
        for token in context:
            while state and token not in nexts[state]:
                state = link[state]
                matched = length[state]
            after = nexts[state].get(token)
            if after is None:
                state = matched = 0
            else:
                state, matched = after, matched + 1
        return self._continued(state, matched)

    def match_open(self, token: int, most: int) -> tuple[int, int]:
        """(state, length) of the longest suffix, at most `most` tokens, of the open sequence
        followed by `token` that occurs with a token after it in what is indexed: the open
        sequence's earlier occurrences included, so a request matches itself."""
        nexts, link, length = self.next, self.link, self.length
        state = self._last
        while state and token not in nexts[state]:
            state = link[state]
        after = nexts[state].get(token)
        if after is None:
            return 0, 0
        matched = length[state] + 1
        if matched > most:
            matched = most
            while link[after] > 0 and length[link[after]] >= most:
                after = link[after]
        return self._continued(after, matched)

    def _continued(self, state: int, matched: int) -> tuple[int, int]:
        """Back along suffix links from a state whose every occurrence ends its sequence."""
        while state and not self.next[state]:
            state = self.link[state]
            matched = self.length[state]
        return state, matched

    def ranked(self, state: int) -> tuple[list[Child], int]:
        """The tokens that followed `state`'s substrings, most often first (ties: the latest
        occurrence first), and how many continuations there were in all."""
        if self._ranked_version != self.version:
            self._ranked.clear()
            self._ranked_version = self.version
        known = self._ranked.get(state)
        if known is not None:
            return known
        count, latest = self.count, self.latest
        children = [(token, child, count[child]) for token, child in self.next[state].items()]
        if len(children) > 1:
            children.sort(key=lambda c: (-c[2], -latest[c[1]]))
        ranked = (children, sum(c[2] for c in children))
        self._ranked[state] = ranked
        return ranked

    def where(self, state: int) -> tuple[int, int]:
        """(sequence, offset) of the latest occurrence of `state`'s substrings: where it ends."""
        position = self.latest[state]
        sequence = bisect_right(self.starts, position) - 1
        return sequence, position - self.starts[sequence]

    def _begin(self) -> None:
        self.starts.append(self.tokens)
        self._last = 0
        self.version += 1

    def _new(self, length: int, link: int, nexts: dict[int, int], count: int, latest: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.next.append(nexts)
        self.count.append(count)
        self.latest.append(latest)
        return len(self.length) - 1

    def _clone(self, state: int, of: int, token: int, length: int) -> int:
        """Split `of` (reached from `state` by `token`): its substrings up to `length` tokens
        move to a clone, which the states that reached `of` by `token` now reach."""
        nexts, link = self.next, self.link
        # Counting as it goes, the clone's substrings occurred wherever `of`'s did; a bulk build
        # gives it those occurrences at the end, through the suffix link from `of`.
        count, latest = (self.count[of], self.latest[of]) if self._counting else (0, -1)
        clone = self._new(length, link[of], dict(nexts[of]), count, latest)
        while state >= 0 and nexts[state].get(token) == of:
            nexts[state][token] = clone
            state = link[state]
        link[of] = clone
        return clone

    def _insert(self, token: int) -> None:
        """The automaton extended by one token of the open sequence (the generalized construction:
        a sequence's prefix may already be a state); `_last` becomes its prefix's state."""
        self.version += 1
        nexts, length, link = self.next, self.length, self.link
        last = self._last
        existing = nexts[last].get(token)
        if existing is not None:  # the prefix occurred before, in another sequence
            if length[existing] == length[last] + 1:
                self._last = existing
            else:
                self._last = self._clone(last, existing, token, length[last] + 1)
            return
        current = len(length)  # a new state (the appends of `_new`, inline: a build makes one a token)
        length.append(length[last] + 1)
        link.append(0)
        nexts.append({})
        self.count.append(0)
        self.latest.append(-1)
        state = last
        while state >= 0 and token not in nexts[state]:
            nexts[state][token] = current
            state = link[state]
        if state >= 0:
            after = nexts[state][token]
            if length[after] == length[state] + 1:
                link[current] = after
            else:
                link[current] = self._clone(state, after, token, length[state] + 1)
        self._last = current

    def _count_up(self) -> None:
        """After a bulk build: each state's occurrences are its own and those of the states whose
        suffix link points at it, longer substrings first: all the states of one length at once
        (their links are shorter), in numpy, or state by state where lengths are too many."""
        lengths = np.asarray(self.length)
        order = np.argsort(-lengths, kind="stable")
        sizes = lengths[order]
        cuts = np.flatnonzero(np.diff(sizes)) + 1
        if len(cuts) > BUCKETS_MAX:
            self._count_up_one_by_one(order.tolist())
            return
        links = np.asarray(self.link)
        counts = np.asarray(self.count, dtype=np.int64)
        latest = np.asarray(self.latest, dtype=np.int64)
        for bucket in np.split(order, cuts):
            if lengths[bucket[0]] == 0:
                break  # the root: nothing above it
            np.add.at(counts, links[bucket], counts[bucket])
            np.maximum.at(latest, links[bucket], latest[bucket])
        self.count, self.latest = counts.tolist(), latest.tolist()
        self.version += 1

    def _count_up_one_by_one(self, order: list[int]) -> None:
        link, count, latest = self.link, self.count, self.latest
        for state in order:
            parent = link[state]
            if parent < 0:
                break
            count[parent] += count[state]
            if latest[state] > latest[parent]:
                latest[parent] = latest[state]
        self.version += 1
