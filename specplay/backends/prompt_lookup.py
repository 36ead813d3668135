"""Prompt lookup (n-gram) drafting: propose what followed the last n tokens where they occurred before.

As vLLM's `ngram` speculator and llama.cpp's lookup decoding: the longest suffix of the context
(prompt and output so far) of n_max down to n_min tokens that occurred earlier is looked up, and
the tokens that followed its latest earlier occurrence are proposed. No model, no weights: plain
Python over the token list, with an index kept up to date as tokens are committed, so a round
costs a few dictionary look-ups however long the context is.
"""

from __future__ import annotations

from collections.abc import Sequence


def copy_after(tokens: Sequence[int], start: int, k: int) -> list[int]:
    """Up to k tokens read from `start` on, as if the proposal were already appended to `tokens`:
    a match near the end then continues through the tokens it proposes (as LZ77 copies overlap),
    so a repeating stretch yields full drafts instead of stopping at the end of the context."""
    proposal = list(tokens[start : start + k])
    while len(proposal) < k:
        proposal.append(proposal[start + len(proposal) - len(tokens)])
    return proposal


class NgramIndex:
    """Where each n-gram (n_min <= n <= n_max) of a token list last ended, for one generation.

    Only committed tokens are ever indexed (a proposal never is), so a rejected draft needs no
    rewind; `length` tokens are indexed, and it only grows as the generation's tokens do.
    """

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.last_end: dict[tuple[int, ...], int] = {}
        self.length = 0
        """Every n-gram lying inside tokens[:length] is indexed at its latest end position."""

    def extend(self, tokens: Sequence[int], length: int) -> None:
        """Index the n-grams that end in tokens[self.length:length]."""
        length = max(length, 0)
        if length < self.length:  # a shorter list than was indexed is another sequence: start over
            self.last_end.clear()
            self.length = 0
        first = self.length
        for n in range(self.n_min, self.n_max + 1):
            first_end = max(first, n - 1)
            if first_end >= length:
                continue
            # Column j holds the j-th token of every n-gram ending in [first_end, length); later
            # occurrences overwrite earlier ones, so each n-gram keeps its latest end.
            columns = [tokens[first_end - n + 1 + j : length - n + 1 + j] for j in range(n)]
            self.last_end.update(zip(zip(*columns, strict=True), range(first_end, length), strict=True))
        self.length = length

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k tokens after the latest earlier occurrence of the longest suffix of `tokens`
        found (n from n_max down to n_min); [] when none occurred before."""
        end = len(tokens)
        # An occurrence must end at end - 2 or earlier: the token after it is then known.
        self.extend(tokens, end - 1)
        for n in range(min(self.n_max, end - 1), self.n_min - 1, -1):
            match = self.last_end.get(tuple(tokens[end - n :]))
            if match is not None:
                return copy_after(tokens, match + 1, k)
        return []
