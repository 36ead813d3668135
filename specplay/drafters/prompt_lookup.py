"""Prompt lookup (n-gram) drafting: propose what followed the last n tokens where they occurred before.

As vLLM's `ngram` speculator and llama.cpp's lookup decoding: the longest suffix of the context
(prompt and output so far) of n_max down to n_min tokens that occurred earlier is looked up, and
the tokens that followed its latest earlier occurrence are proposed. No model, no weights: plain
Python over the token list, with an index kept up to date as tokens are committed, so a round
costs a few dictionary look-ups however long the context is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specplay.drafters.kind import DrafterKind, options
from specplay.drafters.model_config import ModelConfig, Role
from specplay.errors import ConfigError

LOOKUP_N = (2, 4)
"""Default n range: matches of 4 tokens down to 2 (on the demo models it drafted more usefully
than vLLM's 5..5 and gained more than 1..3)."""
LOOKUP_N_MAX = 16
"""The longest n-gram looked up: beyond it a match is no likelier to continue, and the index grows."""


class PromptLookupKind(DrafterKind):
    """Proposes the tokens that followed the latest earlier occurrence of the context's last n
    tokens, n from n_max down to n_min; drafts nothing when none occurred. Free: no weights."""

    name = "prompt-lookup"
    syntax = "prompt-lookup[:n=MIN-MAX]"
    summary = "proposes what followed the last match of the last n tokens"
    form = "proposer"
    cannot_write = "prompt lookup only copies, it cannot write alone"

    def parse(self, name: str, role: Role, given: str | None, field: str) -> ModelConfig:
        params = options(given, field, self.name) if given is not None else {}
        unknown = set(params) - {"n"}
        if unknown:
            raise ConfigError(field, f"prompt-lookup takes n=MIN-MAX, not {', '.join(sorted(unknown))}")
        if "n" not in params:
            return ModelConfig(name, role, self.name, "", {"n_min": LOOKUP_N[0], "n_max": LOOKUP_N[1]})
        low, sep, high = params["n"].partition("-")
        try:
            n_min, n_max = int(low), int(high if sep else low)
        except ValueError:
            n_min = n_max = 0
        if not 1 <= n_min <= n_max <= LOOKUP_N_MAX:
            raise ConfigError(
                field, f"prompt-lookup:n={params['n']} needs n=MIN-MAX with 1 <= MIN <= MAX <= {LOOKUP_N_MAX}"
            )
        return ModelConfig(name, role, self.name, "", {"n_min": n_min, "n_max": n_max})

    def describe(self, model: ModelConfig) -> str:
        return f"prompt lookup, n {model.params['n_min']}..{model.params['n_max']}"

    def replay(self, name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
        return ModelConfig(name, role, self.name, "", {"n_min": int(record["n_min"]), "n_max": int(record["n_max"])})

    def proposer(self, model: ModelConfig) -> NgramIndex:
        return NgramIndex(model.params["n_min"], model.params["n_max"])


PROMPT_LOOKUP = PromptLookupKind()


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
