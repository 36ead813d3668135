"""Draft trees on MLX (engine/tree.py's rules): a drafter grows a tree level by level, and the
target scores all of its nodes in one forward pass.

A tree pass lays the nodes out flat after the cache's tokens. Each node attends to the context
and to its ancestors (a boolean mask, where a chain has the causal one) and is rotated at its own
position, context length + depth - 1, so siblings share one. mlx-lm's attention takes a mask
but rotates tokens at consecutive positions from the cache's offset, so for the length of a pass
each layer's rotary embedding is swapped for one that rotates each row at its own position.
That needs a model split into its layers (early_exit.LayerSplit: the llama family); another
family drafts and verifies chains.

After the round only the kept path's cache entries are moved to follow the context, as a chain's
accepted prefix would be there, and the rest are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.cache import KVCache, trim_prompt_cache

from specplay.backends.mlx.early_exit import ExitHead, LayerSplit
from specplay.engine.draws import RoundDraws
from specplay.engine.layout import ROOT, depths, is_chain
from specplay.engine.sampling import sampling_probs, softmax
from specplay.engine.settings import SamplingParams
from specplay.engine.tree import (
    TreeShape,
    VerifiedDraft,
    draw_siblings,
    greedy_numbers,
    level_counts,
    row_uniforms,
    sampled_numbers,
    sampled_tree,
    sees,
)
from specplay.errors import ModelError

NO_TREE_PASS = (
    "its model family cannot take a tree mask and a position per token (trees need the llama family: llama, "
    "mistral, qwen2, qwen3), so its rounds draft chains"
)


class _RowRope(nn.Module):
    """A layer's rotary embedding with a position per row: the rows go along the batch axis, which
    takes one offset each (a pass holds one sequence)."""

    def __init__(self, rope: Any, positions: mx.array) -> None:
        super().__init__()
        object.__setattr__(self, "_rope", rope)
        object.__setattr__(self, "_positions", positions)

    def __call__(self, x: mx.array, offset: int = 0) -> mx.array:
        rows = x.transpose(2, 1, 0, 3)  # [batch 1, heads, rows, dims] -> [rows, heads, 1, dims]
        return self._rope(rows, offset=self._positions).transpose(2, 1, 0, 3)


@contextmanager
def _positions(layers: Sequence[nn.Module], positions: mx.array) -> Iterator[None]:
    attentions = [layer.self_attn for layer in layers]
    ropes = [attention["rope"] for attention in attentions]
    try:
        for attention, rope in zip(attentions, ropes, strict=True):
            attention["rope"] = _RowRope(rope, positions)
        yield
    finally:
        for attention, rope in zip(attentions, ropes, strict=True):
            attention["rope"] = rope


@dataclass(frozen=True)
class TreePass:
    """A model's forward pass over a tree: its first `layers` layers, an exit head if any, its
    own norm and output head."""

    split: LayerSplit
    layers: int
    head: ExitHead | None = None

    def __call__(self, inputs: mx.array, cache: list[Any], mask: mx.array, positions: Sequence[int]) -> mx.array:
        """Logits [rows, vocab] for `inputs`, rows masked by `mask` [rows, cache + rows], each
        rotated at its own position."""
        with _positions(self.split.layers[: self.layers], mx.array(list(positions))):
            h = self.split.run(self.split.embed(inputs[None]), 0, self.layers, cache, mask=mask)
        if self.head is not None:
            h = self.head(h)
        return self.split.logits(h)[0]


def tree_pass(model: Any, label: str, head: ExitHead | None = None, layers: int | None = None) -> TreePass | None:
    """`model`'s tree pass (`model` an mlx-lm model or a LayerSplit), or None where its family's
    attention cannot take a tree mask and per-token positions (it then drafts chains)."""
    try:
        split = model if isinstance(model, LayerSplit) else LayerSplit(model, label)
    except ModelError:
        return None
    usable = split.sliding_window is None and all(hasattr(layer.self_attn, "rope") for layer in split.layers)
    return TreePass(split, len(split.layers) if layers is None else layers, head) if usable else None


def _cache_mask(
    parents: Sequence[int], rows: range, before: int, pending: int = 0, tree_start: int | None = None
) -> mx.array:
    """The mask of a pass over `pending` chain tokens then tree nodes `rows`: all see the `before`
    tokens already cached; chain tokens see each other causally; a node sees every chain token,
    itself and its ancestors (cached from `tree_start` in node order)."""
    tree_start = before + pending if tree_start is None else tree_start
    width = tree_start + rows.stop
    mask = np.zeros((pending + len(rows), width), dtype=bool)
    mask[:, :before] = True
    for r in range(pending):
        mask[r, before : before + r + 1] = True
    seen = sees(parents[: rows.stop])
    for r, node in enumerate(rows):
        mask[pending + r, before : before + pending] = True
        mask[pending + r, tree_start : tree_start + rows.stop] = seen[node]
    return mx.array(mask)


@dataclass
class MlxTree:
    """A drafted tree on its way to verification."""

    tokens: list[int]
    parents: list[int]
    p_draft: mx.array | None
    """[nodes + 1, vocab]: the drafter's distribution at each row (zero at rows never expanded);
    None at temperature 0, where judging reads the target's argmax alone, and for a proposer's
    tree at every temperature: each of its nodes is certain (one-hot on itself)."""
    origin: str | None = None
    """The drafter's note on where the tree came from (a proposer's; kind.Proposal)."""


def grow_tree(
    cache: Any, tokens: Sequence[int], shape: TreeShape, sampling: SamplingParams, drawn: Sequence[float]
) -> MlxTree:
    """tree.py's shape from a drafter with a KV cache and a tree pass (`cache`: its ModelCache), a pass per level.
    The nodes' cache entries are dropped when done; the kept path is taken in as pending tokens
    next round, as a catch-up is."""
    logits = cache.forward(cache.pending(tokens))[-1:]
    base = cache.length
    parents: list[int] = []
    drafted: list[int] = []
    rows: list[mx.array] = []
    level, confidence, depth = [ROOT], [1.0], 0
    while depth < shape.depth and len(drafted) < shape.nodes:
        belief = softmax(logits, mx) if sampling.greedy else sampling_probs(logits, sampling, mx)
        if not sampling.greedy:  # greedy judging reads the target's argmax alone
            rows.append(belief)
        width = min(shape.width, belief.shape[-1])
        top = mx.sort(mx.topk(belief, width, axis=-1), axis=-1)[:, ::-1]
        values = (mx.array(confidence)[:, None] * top).tolist()
        counts = level_counts(values, min(shape.width, shape.nodes - len(drafted)))
        if not any(counts):
            break
        first = len(drafted)
        if sampling.greedy:  # the most likely first: the largest few found, then ordered
            few = mx.argpartition(-logits, kth=width - 1, axis=-1)[:, :width]
            order = mx.argsort(-mx.take_along_axis(logits, few, axis=-1), axis=-1)
            picks = mx.take_along_axis(few, order, axis=-1)[:, : max(counts)]
        else:
            slots = np.zeros((max(counts), len(level)), dtype=np.float32)
            index = first
            for row, count in enumerate(counts):
                slots[:count, row] = drawn[index : index + count]
                index += count
            picks = mx.stack(draw_siblings(belief, [mx.array(u) for u in slots], mx), axis=-1)
        kept = mx.take_along_axis(belief, picks, axis=-1)
        mx.eval(picks, kept)
        picked, probability = picks.tolist(), kept.tolist()
        next_confidence = []
        for row, count in enumerate(counts):
            for j in range(count):
                parents.append(level[row])
                drafted.append(picked[row][j])
                next_confidence.append(confidence[row] * probability[row][j])
        level, confidence, depth = list(range(first, len(drafted))), next_confidence, depth + 1
        if depth < shape.depth and len(drafted) < shape.nodes:
            fed = range(first, len(drafted))
            mask = _cache_mask(parents, fed, before=base, tree_start=base)
            inputs = mx.array(drafted[first:], dtype=mx.int32)
            logits = cache.forward_tree(inputs, mask, [base - 1 + depth] * len(fed))
    cache.trim_to(base)
    if sampling.greedy:
        return MlxTree(drafted, parents, None)
    vocab = rows[0].shape[-1]
    unexpanded = len(drafted) + 1 - sum(r.shape[0] for r in rows)
    return MlxTree(drafted, parents, mx.concatenate([*rows, mx.zeros((unexpanded, vocab), dtype=rows[0].dtype)]))


def verify_pass(cache: Any, tokens: Sequence[int], draft: MlxTree) -> tuple[mx.array, int]:
    """The target's logits at every row of `draft` [nodes + 1, vocab], from one pass over the
    pending tokens and the nodes; returns them and where the nodes' cache entries start."""
    pending = cache.pending(tokens)
    before, count = cache.length, pending.shape[0]
    if not draft.tokens or cache.tree_pass is None or is_chain(draft.parents):  # a chain: the causal pass
        inputs = mx.concatenate([pending, mx.array(draft.tokens, dtype=mx.int32)]) if draft.tokens else pending
        return cache.forward(inputs)[-(len(draft.tokens) + 1) :], before + count
    positions = [*range(before, before + count), *(before + count - 1 + d for d in depths(draft.parents))]
    mask = _cache_mask(draft.parents, range(len(draft.tokens)), before=before, pending=count)
    inputs = mx.concatenate([pending, mx.array(draft.tokens, dtype=mx.int32)])
    return cache.forward_tree(inputs, mask, positions)[-(len(draft.tokens) + 1) :], before + count


def judged_numbers(draft: MlxTree, logits: mx.array, sampling: SamplingParams, draws: RoundDraws) -> VerifiedDraft:
    """tree.py's judging numbers from the target's rows, in one transfer to the host."""
    if sampling.greedy:
        return greedy_numbers(draft.parents, draft.tokens, mx.argmax(logits, axis=-1).tolist())
    uniforms = row_uniforms(draws.residual, draws.bonus, len(draft.tokens))
    out = sampled_numbers(
        sampling_probs(logits, sampling, mx),
        draft.p_draft,
        parents=draft.parents,
        drafted=draft.tokens,
        uniforms=mx.array(np.asarray(uniforms, dtype=np.float32)),
        xp=mx,
    )
    mx.eval(out)  # the round's one transfer to the host
    return sampled_tree(draft.parents, draft.tokens, {name: value.tolist() for name, value in out.items()})


def keep_path(cache: Any, start: int, nodes: int, path: Sequence[int]) -> None:
    """After a tree pass whose `nodes` entries start at `start`: move the kept path's entries to
    follow the context and drop the rest."""
    if list(path) != list(range(len(path))):  # a chain's kept prefix is already in place
        kept = mx.array([start + node for node in path], dtype=mx.int32)
        for layer in cache.cache:
            if not isinstance(layer, KVCache):
                raise AssertionError("tree passes run on plain KV caches only")
            end = start + len(path)
            layer.keys[..., start:end, :] = mx.take(layer.keys, kept, axis=2)
            layer.values[..., start:end, :] = mx.take(layer.values, kept, axis=2)
    dropped = cache.length - (start + len(path))
    if dropped > 0:
        trim_prompt_cache(cache.cache, dropped)
        cache.length -= dropped
