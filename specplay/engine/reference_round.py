"""The engine's speculative round in plain numpy: the oracle the tests hold the engine to.

Speculative sampling (Leviathan et al. 2023), one round, a chain of k drafted tokens being the
tree of width 1 (tree.py):
  1. draft x_i ~ p_draft(. | context, x_<i) for i < k (a tree: by tree.py's shape, level by level);
  2. keep x_i iff u_i < a(x_i), from the root (lossless: a(x) = min(1, p_target(x) / p_draft(x));
     siblings by recursive rejection sampling);
  3. at the first rejection draw the correction from norm(max(p_target - p_draft, 0)), else,
     with all kept, a bonus token from p_target after them.
Every draw is the engine's: a round of N nodes takes its 3N + 1 uniforms from `Draws(seed)` as
`RoundDraws`, each token drawn by inverse CDF. At
temperature 0 the distributions are one-hot, which makes every draw the argmax. No caches, no
backend, no events: each model's distribution is recomputed from the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from specplay.engine.accept import inverse_cdf_sample, lossless_accept_probability, residual_distribution, tv_distance
from specplay.engine.draws import Draws, RoundDraws
from specplay.engine.layout import ROOT
from specplay.engine.tree import TreeShape, level_counts, tree_shape

if TYPE_CHECKING:
    from specplay.engine.rules import AcceptanceRule

Probs = Callable[[Sequence[int]], np.ndarray]
"""A model's next-token distribution [vocab] after a whole token sequence, sampling settings applied."""
Accept = Callable[[np.ndarray, np.ndarray, int], float]
"""a(x) at one position from (p_target, p_draft, x)."""


def lossless(p_target: np.ndarray, p_draft: np.ndarray, x: int) -> float:
    return lossless_accept_probability(float(p_target[x]), float(p_draft[x]))


def rule_acceptance(rule: AcceptanceRule) -> Accept:
    """Any rule of rules.py as the engine's judge asks it: a(x) from p_target(x), p_draft(x), d
    and the statistics the rule names, taken from the two rows."""

    def accept(p_target: np.ndarray, p_draft: np.ndarray, x: int) -> float:
        stats = {"tv": float(tv_distance(p_target, p_draft))}
        stats |= {name: float(v.item()) for name, v in rule.statistics(p_target[None], p_draft[None], np).items()}
        return rule.accept_probability(float(p_target[x]), float(p_draft[x]), stats)

    return accept


def _sample(probs: np.ndarray, uniform: float) -> int:
    return int(inverse_cdf_sample(probs[None], np.array([uniform]), np)[0])


def _row(probs: Probs, ids: Sequence[int]) -> np.ndarray:
    return np.asarray(probs(ids), dtype=np.float64)


def reference_grown_tree(
    belief: Probs, context: Sequence[int], shape: TreeShape, uniforms: Sequence[float], greedy: bool
) -> tuple[list[int], list[int], list[np.ndarray]]:
    """A draft tree by tree.py's shape rule, level by level, each row recomputed from its whole
    path: (parents, tokens, the drafter's rows at the rows it expanded, in row order). `belief`
    orders and weighs children: the drafter's sampling distribution, or at temperature 0 its
    temperature-1 softmax (whose order is its logits')."""
    parents: list[int] = []
    drafted: list[int] = []
    rows: list[np.ndarray] = []

    def path(node: int) -> list[int]:
        out = []
        while node != ROOT:
            out.append(drafted[node])
            node = parents[node]
        return out[::-1]

    level, confidence = [ROOT], [1.0]
    for _ in range(shape.depth):
        if len(drafted) >= shape.nodes:
            break
        level_rows = [_row(belief, [*context, *path(node)]) for node in level]
        rows += level_rows
        values = [c * np.sort(row)[::-1][: shape.width] for c, row in zip(confidence, level_rows, strict=True)]
        counts = level_counts(values, min(shape.width, shape.nodes - len(drafted)))
        first, next_confidence = len(drafted), []
        for node, c, row, count in zip(level, confidence, level_rows, counts, strict=True):
            if greedy:
                picks = [int(t) for t in np.argsort(-row, kind="stable")[:count]]
            else:
                left, picks = row.copy(), []
                for u in uniforms[len(drafted) : len(drafted) + count]:  # without replacement
                    picks.append(_sample(left / left.sum(), u))
                    left[picks[-1]] = 0.0
            for token in picks:
                parents.append(node)
                drafted.append(token)
                next_confidence.append(c * float(row[token]))
        level, confidence = list(range(first, len(drafted))), next_confidence
    return parents, drafted, rows


def reference_speculative(
    target_probs: Probs,
    draft_probs: Probs,
    prompt_ids: Sequence[int],
    *,
    k: int,
    max_tokens: int,
    seed: int,
    width: int = 1,
    nodes: int = 0,
    greedy: bool = False,
    eos_ids: frozenset[int] = frozenset(),
    accept: Accept = lossless,
) -> list[int]:
    """The token ids the engine commits with a fixed k, up to max_tokens, an EOS ending the run
    unoutput. Each round's draft is grown as above (width 1: a chain of k), each row's target
    distribution recomputed from its path, and judged row by row from the root: a row's only
    child is kept iff u < `accept` (the rule's a(x)); among siblings, `greedy` keeps the target's
    argmax, else each is kept with probability min(1, p_target(x) / p_draft(x)), p_target becoming
    the residual and p_draft losing x after each rejection. Where no child is kept, the row's
    token is drawn from what is left. `target_probs` gives the sampling distribution (one-hot at
    temperature 0); `draft_probs` the drafter's (at temperature 0 for trees, its temperature-1
    softmax, which orders and weighs the children)."""
    stream, out = Draws(seed), []
    while True:
        remaining = max_tokens - len(out)
        shape = tree_shape(width, nodes, min(k, remaining))  # the engine never drafts past the token limit
        draws = RoundDraws.take(stream, shape.nodes)
        context = [*prompt_ids, *out]
        parents, drafted, rows = reference_grown_tree(draft_probs, context, shape, draws.draft, greedy)
        row_uniforms = [*draws.residual, draws.bonus]
        committed: list[int] = []
        row, path = 0, []
        p_draft_rows = [*rows, *[None] * (len(drafted) + 1 - len(rows))]
        while True:
            p_target = _row(target_probs, [*context, *path])
            p_draft = p_draft_rows[row]
            siblings = [n for n, parent in enumerate(parents) if parent + 1 == row]
            kept = None
            for node in siblings:
                x = drafted[node]
                assert p_draft is not None
                if greedy and len(siblings) > 1:
                    if x == int(np.argmax(p_target)):
                        kept = node
                        break
                    continue
                a = accept(p_target, p_draft, x) if len(siblings) == 1 else lossless(p_target, p_draft, x)
                if draws.accept[node] < a:
                    kept = node
                    break
                p_target = residual_distribution(p_target, p_draft, np)
                p_draft = p_draft.copy()
                p_draft[x] = 0.0
                p_draft = p_draft / p_draft.sum() if p_draft.sum() > 0 else p_draft
            if kept is None:
                greedy_end = greedy and len(siblings) > 1
                end = int(np.argmax(p_target)) if greedy_end else _sample(p_target, row_uniforms[row])
                committed.append(end)
                break
            committed.append(drafted[kept])
            path.append(drafted[kept])
            if drafted[kept] in eos_ids or len(committed) == remaining:
                break
            row = kept + 1
        for token in committed:
            if token in eos_ids:
                return out
            out.append(token)
            if len(out) == max_tokens:
                return out
