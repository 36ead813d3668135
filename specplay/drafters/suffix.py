"""Suffix decoding (SuffixDecoding, NeurIPS 2025; Snowflake's Arctic Inference; vLLM's `suffix`):
a drafter that remembers what the target has already written.

It keeps a suffix index (suffix_index.py) over the current request (prompt, earlier turns and
output so far) and one over earlier outputs: those saved in the sessions folder, read as the
command starts, and those of this process's generations as each ends. Each round it matches the
longest suffix of the context, at most `depth` tokens, in either index, and drafts what most
often followed there: a chain, or at width > 1 a tree whose branches are the other
continuations, each weighed by its count. The draft runs to at most `factor` x the match length
+ `offset` tokens and stops where a token's estimated probability (its count's share, times its
path's) falls below `min_prob`. Between the two indexes the draft worth more (the sum of its
nodes' probabilities) wins, then the longer match.

No weights, no distribution of its own: every drafted token is certain (one-hot), so at any
temperature judging stays lossless, as for prompt lookup; siblings are judged one after another,
each against what the ones before left of the target's distribution (engine/tree.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specplay.drafters.kind import DrafterKind, Proposal, options
from specplay.drafters.memory import EarlierOutputs
from specplay.drafters.model_config import ModelConfig, Role
from specplay.drafters.suffix_index import SuffixIndex
from specplay.engine.layout import ROOT
from specplay.engine.tree import TreeShape, level_counts
from specplay.errors import ConfigError

DEPTH = 24
"""The longest match looked up, as vLLM's default tree depth: a longer one is no likelier to go on."""
DEPTH_MAX = 256
FACTOR, OFFSET = 1.0, 0.0
"""A draft runs to factor x match length + offset tokens at most (Arctic's and vLLM's defaults)."""
MIN_PROB = 0.1
"""Drafting stops below this estimated probability (vLLM's default)."""
MEMORY = 100_000
"""Tokens of earlier outputs held: the size the speed budget is measured at (benchmarks/bench_suffix.py)."""
MEMORY_MAX = 1_000_000
"""About 400 MB of index (some 400 bytes a token) and seconds to build as the command starts."""
KEEP_AFTER_FORGETTING = 0.75
"""Past its memory, it forgets the oldest outputs down to this share of it: the index is then
built again, once in many generations rather than at each."""
OPTIONS = ("depth", "factor", "offset", "min_prob", "memory")


@dataclass(frozen=True, slots=True)
class SuffixParams:
    """A suffix drafter's options, as `suffix:KEY=VALUE,...` gives them (the defaults above)."""

    depth: int = DEPTH
    factor: float = FACTOR
    offset: float = OFFSET
    min_prob: float = MIN_PROB
    memory: int = MEMORY

    @classmethod
    def of(cls, model: ModelConfig) -> SuffixParams:
        return cls(**{name: model.params[name] for name in OPTIONS if name in model.params})

    def most_tokens(self, matched: int) -> int:
        """The longest draft a match of `matched` tokens earns."""
        return max(0, math.floor(self.factor * matched + self.offset + 1e-6))


RANGES: dict[str, tuple[bool, float, float]] = {
    "depth": (True, 1, DEPTH_MAX),
    "factor": (False, 0, 1000),
    "offset": (False, 0, 1000),
    "min_prob": (False, 0, 1),
    "memory": (True, 0, MEMORY_MAX),
}
"""Each option: (a whole number?, least, most)."""


def _number(name: str, text: str, field: str) -> Any:
    whole, low, high = RANGES[name]
    try:
        value: float = int(text) if whole else float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN fails too
        what, bounds = (
            ("a whole number", f"{int(low):,} to {int(high):,}") if whole else ("a number", f"{low:g} to {high:g}")
        )
        raise ConfigError(field, f"suffix:{name}={text} must be {what} from {bounds}")
    return value


class SuffixKind(DrafterKind):
    """Drafts what most often followed the longest suffix match of the context, in the current
    request and in earlier outputs (the sessions folder's and this process's); a tree at width > 1.
    Free: no weights."""

    name = "suffix"
    syntax = "suffix[:depth=D,factor=F,offset=O,min_prob=P,memory=N]"
    summary = "drafts what followed the longest match in this request and in earlier outputs"
    form = "proposer"
    grows_trees = True
    cannot_write = "suffix decoding only copies what was written before, it cannot write alone"

    def parse(self, name: str, role: Role, given: str | None, field: str) -> ModelConfig:
        params = options(given, field, self.name) if given is not None else {}
        unknown = set(params) - set(OPTIONS)
        if unknown:
            raise ConfigError(
                field, f"suffix takes {', '.join(f'{o}=' for o in OPTIONS)}, not {', '.join(sorted(unknown))}"
            )
        values = {option: _number(option, text, field) for option, text in params.items()}
        if "factor" in values or "offset" in values:
            check = SuffixParams(**values)
            if check.most_tokens(check.depth) < 1:
                raise ConfigError(
                    field, "suffix drafts at most factor x match length + offset tokens: give factor or offset above 0"
                )
        return ModelConfig(name, role, self.name, "", {**vars_of(SuffixParams()), **values})

    def describe(self, model: ModelConfig) -> str:
        params = SuffixParams.of(model)
        memory = f"memory {params.memory:,} tokens" if params.memory else "no memory (this request only)"
        return f"suffix decoding, matches up to {params.depth} tokens, {memory}"

    def replay(self, name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
        values = {
            "depth": int(record["depth"]),
            "factor": float(record["factor"]),
            "offset": float(record["offset"]),
            "min_prob": float(record["min_prob"]),
            "memory": int(record["memory"]),
        }
        return ModelConfig(name, role, self.name, "", values)

    def recalls(self, model: ModelConfig) -> int:
        return SuffixParams.of(model).memory

    def proposers(self, model: ModelConfig, earlier: EarlierOutputs | None) -> SuffixMemory:
        return SuffixMemory(SuffixParams.of(model), earlier)


def vars_of(params: SuffixParams) -> dict[str, Any]:
    return {name: getattr(params, name) for name in OPTIONS}


SUFFIX = SuffixKind()


class SuffixMemory:
    """Earlier outputs, indexed: read as the command started, and this process's as each
    generation ends; at most `memory` tokens, the oldest forgotten first."""

    def __init__(self, params: SuffixParams, earlier: EarlierOutputs | None) -> None:
        self.params = params
        self._outputs: deque[tuple[tuple[int, ...], str]] = deque()
        self._seen: set[tuple[int, ...]] = set()
        self.runs = 0
        """Outputs this process remembered."""
        read: list[tuple[tuple[int, ...], str]] = []
        if earlier is not None and params.memory:
            room = params.memory
            for output in reversed(earlier.outputs):  # newest first, while they fit
                if room <= 0:
                    break
                tokens = output.token_ids[-room:]
                if tokens and tokens not in self._seen:
                    self._seen.add(tokens)
                    read.append((tokens, output.where))
                    room -= len(tokens)
        self._outputs.extend(reversed(read))
        self.index = SuffixIndex.built(tokens for tokens, _ in self._outputs)
        self.note = self._note(earlier)

    @property
    def tokens(self) -> int:
        return self.index.tokens

    def label(self, sequence: int) -> str:
        return self._outputs[sequence][1]

    def _note(self, earlier: EarlierOutputs | None) -> str:
        if not self.params.memory:
            return "memory off (memory=0): it drafts from the current request only"
        if earlier is None:
            return "no sessions read: it remembers this process's outputs"
        return f"memory of {self.tokens:,} tokens: it {earlier.describe()}"

    def open(self) -> SuffixProposer:
        return SuffixProposer(self)

    def remember(self, output: Sequence[int]) -> None:
        """Index a generation's output (an output seen already, the other lane's at temperature 0,
        adds nothing); past `memory` tokens, forget the oldest."""
        most = self.params.memory
        tokens = tuple(output[-most:]) if most else ()
        if not tokens or tokens in self._seen:
            return
        self._seen.add(tokens)
        self.runs += 1
        self._outputs.append((tokens, f"an output of this process (its {_ordinal(self.runs)})"))
        if self.index.tokens + len(tokens) <= most:
            self.index.add(tokens)
            return
        held = sum(len(t) for t, _ in self._outputs)
        while held > most * KEEP_AFTER_FORGETTING and len(self._outputs) > 1:
            forgotten, _ = self._outputs.popleft()
            self._seen.discard(forgotten)
            held -= len(forgotten)
        self.index = SuffixIndex.built(t for t, _ in self._outputs)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True, slots=True)
class _Draft:
    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    score: float
    """The sum of its nodes' estimated probabilities: the tokens it expects to be kept."""
    matched: int
    index: SuffixIndex
    end: int
    """The state its first branch ends in (where that continuation was seen)."""
    first: tuple[int, int]
    """(count, total) of its first token."""


def grow(index: SuffixIndex, state: int, matched: int, shape: TreeShape, params: SuffixParams) -> _Draft | None:
    """The draft from a match: by tree.py's shape rule, level by level, a slot (node, rank) worth
    the node's path probability times the rank's count share, slots under `min_prob` left out
    (width 1: the most frequent continuation, token by token)."""
    depth = min(shape.depth, params.most_tokens(matched))
    parents: list[int] = []
    tokens: list[int] = []
    score = 0.0
    level = [(ROOT, state, 1.0)]
    first = (0, 0)
    while level and depth > 0 and len(tokens) < shape.nodes:
        options, values = [], []
        for _, at, confidence in level:
            children, total = index.ranked(at)
            top = children[: shape.width]
            options.append((top, total))
            shares = [confidence * count / total for _, _, count in top]
            values.append([share if share >= params.min_prob else 0.0 for share in shares])
        counts = level_counts(values, min(shape.width, shape.nodes - len(tokens)))
        next_level = []
        for (node, _, _), (top, total), row, count in zip(level, options, values, counts, strict=True):
            for (token, child, seen), value in zip(top[:count], row[:count], strict=True):
                if not tokens:
                    first = (seen, total)
                parents.append(node)
                tokens.append(token)
                score += value
                next_level.append((len(tokens) - 1, child, value))
        level = next_level
        depth -= 1
    if not tokens:
        return None
    end, node = state, 0
    while True:  # down the first branch: its last node's state
        end = index.next[end][tokens[node]]
        below = [n for n in range(node + 1, len(tokens)) if parents[n] == node]
        if not below:
            break
        node = below[0]
    return _Draft(
        tokens=tuple(tokens), parents=tuple(parents), score=score, matched=matched, index=index, end=end, first=first
    )


class SuffixProposer:
    """Suffix decoding for one generation: the request's own index as it grows, and the memory."""

    def __init__(self, memory: SuffixMemory) -> None:
        self.memory, self.params = memory, memory.params
        self.request = SuffixIndex()
        self.request.open()
        self.length = 0

    def extend(self, tokens: Sequence[int], length: int) -> None:
        length = max(length, 0)
        if length < self.length:  # another sequence (a conversation's next turn that parts earlier)
            self.request = SuffixIndex()
            self.request.open()
            self.length = 0
        for token in tokens[self.length : length]:
            self.request.append(token)
        self.length = max(self.length, length)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        return list(self.draft(tokens, TreeShape(width=1, nodes=k, depth=k)).tokens)

    def draft(self, tokens: Sequence[int], shape: TreeShape) -> Proposal:
        if not tokens or shape.depth <= 0 or shape.nodes <= 0:
            return Proposal((), ())
        # The request's index holds its tokens but the last, so an occurrence found there has a
        # token after it; the last one is matched on.
        self.extend(tokens, len(tokens) - 1)
        depth = self.params.depth
        drafts = []
        state, matched = self.request.match_open(tokens[-1], depth)
        if matched:
            drafts.append(grow(self.request, state, matched, shape, self.params))
        memory = self.memory.index
        if memory.tokens:
            state, matched = memory.match(tokens[-depth:])
            if matched:
                drafts.append(grow(memory, state, matched, shape, self.params))
        found = [d for d in drafts if d is not None]
        if not found:
            return Proposal((), ())
        best = max(found, key=lambda d: (d.score, d.matched, d.index is self.request))
        return Proposal(best.tokens, best.parents, self._origin(best))

    def _origin(self, draft: _Draft) -> str:
        sequence, _ = draft.index.where(draft.end)
        where = "this request" if draft.index is self.request else self.memory.label(sequence)
        seen, total = draft.first
        return (
            f"matched {draft.matched} token{'s' * (draft.matched != 1)} of {where}; "
            f"the first drafted token followed it {seen} of {total} times"
        )
