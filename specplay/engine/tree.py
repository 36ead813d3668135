"""Draft trees: a round drafts several candidates where the drafter is unsure, and the target
judges them all in one pass. The rules, defined here once:

Layout. A tree's nodes are flat in breadth-first order with a parent list: `parents[i]` is the
index of node i's parent, ROOT (-1) for a child of the last committed token. Distributions come
in *rows*: row 0 is the root's (after the last committed token), row i + 1 node i's. Siblings
share a position, context length + depth - 1 in the target's sequence.

Shape (EAGLE-2's dynamic tree, by levels). Every node of a level is expanded; the level's
children are the `width` best *slots* among them, a slot (node n, rank r) being worth n's path
confidence times the r-th largest probability of the drafter's distribution at n. The number
of children of each node is thus fixed by the drafter's distributions before any child is
drawn, which sampled judging needs (below). A chain is the tree of width 1.

Children. At temperature 0 a node's children are the drafter's most likely tokens. Sampled,
they are drawn without replacement from the drafter's distribution, one uniform each.

Judging (lossless). From the root, the children of the current row are tried in order:
- greedy: a child is kept iff it is the target's argmax there; else the argmax is the correction;
- sampled, recursive rejection sampling without replacement (SpecInfer's multi-draft
  verification; Jeon et al. 2024): child x is kept with probability min(1, p_target(x) /
  p_draft(x)); after a rejection p_target becomes the residual norm(max(p_target - p_draft, 0))
  and p_draft loses x (renormalised), and the next sibling is tried. When all are rejected, the
  correction is drawn from the last residual. Each step is a lossless speculative step, so the
  token emitted at every row is distributed exactly as p_target (tests/engine/test_tree.py
  enumerates it).
A kept child becomes the current row; a kept leaf ends the round with a bonus drawn from its
row. Relaxed rules are not defined over siblings here: trees judge losslessly only.

Draws. A tree of N nodes takes a chain's 3N + 1 uniforms (`RoundDraws.take(draws, N)`): node i
is drawn with draft[i] and judged with accept[i]; row r's correction or bonus is drawn with
(residual + [bonus])[r]. A chain drafted as a tree therefore draws exactly as the chain does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specplay.engine.accept import Array, inverse_cdf_sample, lossless_acceptance, residual_distribution, tv_distance
from specplay.engine.events import KEPT, DraftPosition, Outcome, RoundEvent, TokenSource

ROOT = -1
"""The parent of a node drafted right after the last committed token."""
CHAINS_ONLY = "trees_drafted_as_chains"
"""A backend's account key (`Generation.account`): the models asked for trees that drafted
chains, each with why, as {model name: reason}."""


def drafted_as_chains(metrics: dict[str, Any]) -> dict[str, str]:
    """{model: why} for the models of a run that drafted chains where trees were asked, read from
    its metrics, where each backend's account sits under the backend's name."""
    found: dict[str, str] = {}
    for account in metrics.values():
        if isinstance(account, dict) and isinstance(account.get(CHAINS_ONLY), dict):
            found |= account[CHAINS_ONLY]
    return found


@dataclass(frozen=True, slots=True)
class TreeShape:
    """How large a round's tree may grow."""

    width: int
    """Children a level adds at most (and a node has at most)."""
    nodes: int
    """Nodes in all at most: the verify pass's rows but one."""
    depth: int
    """Levels at most: the policy's draft length."""


def tree_shape(width: int, nodes: int, k: int) -> TreeShape:
    """The shape of a round whose policy asked for k: `nodes` 0 means width x k (a level adds
    at most `width` nodes, so a tree of depth k has no more)."""
    depth = min(k, nodes or k)
    return TreeShape(width=width, nodes=min(nodes or width * k, width * depth), depth=depth)


def verify_rows(width: int, nodes: int, k: int) -> int:
    """The rows the verify pass of a round asked for k scores: the root's and one a node (k + 1
    for a chain, the tree of width 1; a round asked for 0 drafts nothing and scores one)."""
    return tree_shape(width, nodes, k).nodes + 1


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's depth, 1 for a child of the root (parents come before their children)."""
    out: list[int] = []
    for parent in parents:
        out.append(1 if parent == ROOT else out[parent] + 1)
    return out


def children(parents: Sequence[int]) -> list[list[int]]:
    """The children of each row in drafting order: row 0 the root, row i + 1 node i."""
    rows: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for node, parent in enumerate(parents):
        rows[parent + 1].append(node)
    return rows


def is_chain(parents: Sequence[int]) -> bool:
    return all(parent == node - 1 for node, parent in enumerate(parents))


def kept_path(parents: Sequence[int], drafted: Sequence[int], committed: Sequence[int]) -> list[int]:
    """The nodes a round kept, from its committed tokens: siblings are distinct tokens, and a
    correction is never one of the siblings it follows (each lost with no residual mass left)."""
    rows = children(parents)
    path: list[int] = []
    row = 0
    for token in committed:
        node = next((n for n in rows[row] if drafted[n] == token), None)
        if node is None:
            break
        path.append(node)
        row = node + 1
    return path


def sees(parents: Sequence[int]) -> list[list[bool]]:
    """[i][j]: node i attends to node j, j being i or one of its ancestors (the tree attention mask)."""
    out = []
    for node in range(len(parents)):
        row = [False] * len(parents)
        at = node
        while at != ROOT:
            row[at] = True
            at = parents[at]
        out.append(row)
    return out


def level_counts(slot_values: Sequence[Sequence[float]], take: int) -> list[int]:
    """Children of each node of a level: the `take` largest positive slot values, a slot (node,
    rank) worth the node's path confidence times its r-th largest drafter probability (rows
    non-increasing, so each node's children are a prefix of its ranks); ties go to the earlier
    node and rank."""
    slots = [(-value, row, rank) for row, values in enumerate(slot_values) for rank, value in enumerate(values)]
    chosen = sorted(slot for slot in slots if slot[0] < 0)[:take]
    counts = [0] * len(slot_values)
    for _, row, _ in chosen:
        counts[row] += 1
    return counts


def without(p_draft: Array, tokens: Array, xp: Any) -> Array:
    """p_draft with each row's token removed and the rest renormalised (a row left with no mass
    stays zero: nothing more is drawn from it)."""
    kept = xp.where(xp.arange(p_draft.shape[-1]) == tokens[..., None], 0.0, p_draft)
    mass = kept.sum(axis=-1, keepdims=True)
    return xp.where(mass > 0, kept / xp.maximum(mass, 1e-30), kept)


def draw_siblings(p_draft: Array, uniforms: Sequence[Array], xp: Any) -> list[Array]:
    """Children drawn without replacement from each row of p_draft, the j-th with uniforms[j]
    (one value per row): inverse-CDF draws, each token removed before the next."""
    drawn = []
    for u in uniforms:
        token = inverse_cdf_sample(p_draft, u, xp)
        drawn.append(token)
        p_draft = without(p_draft, token, xp)
    return drawn


def sibling_step(p_target: Array, p_draft: Array, tokens: Array, xp: Any) -> tuple[Array, Array, Array]:
    """One sibling judged in each row: (its acceptance probability min(1, p_target(x) /
    p_draft(x)), the p_target and p_draft the next sibling is judged against)."""
    column = tokens[..., None]
    p_target_x = xp.take_along_axis(p_target, column, axis=-1)[..., 0]
    p_draft_x = xp.take_along_axis(p_draft, column, axis=-1)[..., 0]
    accept = lossless_acceptance(p_target_x, p_draft_x, xp)
    return accept, residual_distribution(p_target, p_draft, xp), without(p_draft, tokens, xp)


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifiedTree:
    """Host copy of a verified draft tree (engine/tree.py): per node what judging and the views
    read, per row the token that ends a round there."""

    drafted: list[int]
    parents: list[int]
    p_target: list[float]
    """p_target(x) at the node's parent row, before any sibling was judged (one-hot greedy)."""
    p_draft: list[float]
    """p_draft(x) there, likewise (1 greedy: the drafter's own top tokens)."""
    tv_distance: list[float]
    """TV(p_target, p_draft) at the node's parent row."""
    accept_probability: list[float]
    """The probability of keeping the node once its earlier siblings lost (1 or 0 greedy)."""
    row_tokens: list[int]
    """Per row (the root, then each node): the correction drawn from the residual left after all
    of its children lost, or, for a leaf, its bonus (the argmax greedy)."""


def greedy_numbers(parents: Sequence[int], drafted: Sequence[int], argmax: Sequence[int]) -> VerifiedTree:
    """Greedy judging's numbers from the target's argmax at each row: a node is kept iff it is
    its parent row's argmax (both distributions one-hot), and every row ends with its argmax."""
    hits = [float(token == argmax[parent + 1]) for token, parent in zip(drafted, parents, strict=True)]
    return VerifiedTree(
        drafted=list(drafted),
        parents=list(parents),
        p_target=hits,
        p_draft=[1.0] * len(drafted),
        tv_distance=[1.0 - hit for hit in hits],
        accept_probability=hits,
        row_tokens=list(argmax),
    )


def sampled_numbers(
    p_target: Array, p_draft: Array, *, parents: Sequence[int], drafted: Sequence[int], uniforms: Array, xp: Any
) -> dict[str, Array]:
    """Sampled judging's numbers from the rows [nodes + 1, vocab] of both models (p_draft zero at
    rows never expanded), as arrays: per node `p_target_x`, `p_draft_x` and `tv` at its parent row
    and `accept` (its probability once its earlier siblings lost: `accept[j]` holds each row's
    j-th child's); per row `row_tokens`, drawn with `uniforms` from what its children left."""
    rows = children(parents)
    parent_rows = xp.array([parent + 1 for parent in parents])
    nodes = xp.array(list(drafted))[:, None]
    out = {
        "p_target_x": xp.take_along_axis(p_target[parent_rows], nodes, axis=-1)[:, 0],
        "p_draft_x": xp.take_along_axis(p_draft[parent_rows], nodes, axis=-1)[:, 0],
        "tv": tv_distance(p_target, p_draft)[parent_rows],
    }
    accepts = []
    for j in range(max(len(r) for r in rows)):  # the j-th sibling of every row at once
        has = xp.array([j < len(r) for r in rows])[:, None]
        tokens = xp.array([drafted[r[j]] if j < len(r) else 0 for r in rows])
        accept, p_next, q_next = sibling_step(p_target, p_draft, tokens, xp)
        accepts.append(accept)
        p_target = xp.where(has, p_next, p_target)
        p_draft = xp.where(has, q_next, p_draft)
    out["accept"] = xp.stack(accepts)
    out["row_tokens"] = inverse_cdf_sample(p_target, uniforms, xp)
    return out


def sampled_tree(parents: Sequence[int], drafted: Sequence[int], host: dict[str, list[Any]]) -> VerifiedTree:
    """A VerifiedTree from `sampled_numbers`' arrays on the host (as lists)."""
    accept = [0.0] * len(drafted)
    for row, nodes in enumerate(children(parents)):
        for j, node in enumerate(nodes):
            accept[node] = host["accept"][j][row]
    return VerifiedTree(
        drafted=list(drafted),
        parents=list(parents),
        p_target=host["p_target_x"],
        p_draft=host["p_draft_x"],
        tv_distance=host["tv"],
        accept_probability=accept,
        row_tokens=host["row_tokens"],
    )


def row_uniforms(residual: Sequence[float], bonus: float, nodes: int) -> list[float]:
    """Row r's uniform: residual[r], the bonus's after the last (tree.py's draws)."""
    return [*residual, bonus][: nodes + 1]


@dataclass(frozen=True, slots=True)
class TreeVerdict:
    """The walk down a judged tree."""

    outcomes: tuple[Outcome, ...]
    """Per node: accepted (on the kept path), rejected (tried and lost) or unreached."""
    path: tuple[int, ...]
    """The kept nodes, root to leaf."""
    committed: tuple[tuple[int, TokenSource], ...]
    """The round's tokens: the kept path, then the correction or bonus (unless an EOS or the
    token limit ended it)."""


def judge_tree(
    parents: Sequence[int],
    drafted: Sequence[int],
    *,
    accept_probability: Sequence[float],
    uniforms: Sequence[float],
    row_tokens: Sequence[int],
    limit: int,
    stops: Callable[[int], bool],
) -> TreeVerdict:
    """Walk from the root: at each row keep the first child whose uniform is below its acceptance
    probability (1 or 0 greedy); with none kept, the row's token (correction, or bonus at a leaf)
    ends the round. `row_tokens[r]` is row r's residual draw after all its children lost, or its
    bonus; `stops(token)`: an EOS that ends the output; at most `limit` tokens."""
    rows = children(parents)
    outcomes: list[Outcome] = ["unreached"] * len(drafted)
    path: list[int] = []
    committed: list[tuple[int, TokenSource]] = []
    row = 0
    while True:
        kept = None
        for node in rows[row]:
            if uniforms[node] < accept_probability[node]:
                outcomes[node], kept = "accepted", node
                break
            outcomes[node] = "rejected"
        if kept is None:
            source: TokenSource = "corrected" if rows[row] else ("bonus" if row else "target")
            committed.append((row_tokens[row], source))
            break
        path.append(kept)
        committed.append((drafted[kept], "accepted"))
        if stops(drafted[kept]) or len(committed) == limit:
            break
        row = kept + 1
    return TreeVerdict(outcomes=tuple(outcomes), path=tuple(path), committed=tuple(committed))


def kept_nodes(event: RoundEvent) -> list[int]:
    """A round's kept positions in order: a chain's prefix, a tree's path (breadth first, so by depth)."""
    return [i for i, position in enumerate(event.positions) if position.outcome in KEPT]


def judged_at(event: RoundEvent, slot: int) -> DraftPosition | None:
    """The drafted position the round's slot-th committed token was judged at: a chain's position
    `slot`; in a tree the kept node at that depth, and for the token after them (a correction) the
    first of the last row's children that lost; None for a bonus."""
    if event.parents is None:
        return event.positions[slot] if slot < len(event.positions) else None
    path = kept_nodes(event)
    if slot < len(path):
        return event.positions[path[slot]]
    row = path[-1] if path else ROOT
    lost = [n for n in siblings_under(event.parents, row) if event.positions[n].outcome == "rejected"]
    return event.positions[lost[0]] if lost else None


def siblings_under(parents: Sequence[int], parent: int) -> list[int]:
    """The children of `parent` (ROOT: the root's), in drafting order."""
    return children(parents)[parent + 1]


def is_layout(parents: Sequence[int], nodes: int) -> bool:
    """Whether `parents` lays out a tree of `nodes` nodes as this file says: one parent each,
    drawn before its child (ROOT or an earlier node)."""
    return len(parents) == nodes and all(ROOT <= parent < node for node, parent in enumerate(parents))
