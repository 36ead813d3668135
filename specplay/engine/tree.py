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
  enumerates it). A proposer's siblings are chosen, not drawn, each certain: each is judged as a
  certain draft alone, p_draft one-hot on itself, against what the ones before left
  (`sampled_numbers` with no p_draft), every step again lossless.
A kept child becomes the current row; a kept leaf ends the round with a bonus drawn from its
row. A row with a single child (every row of a chain) is judged by the run's acceptance rule
(rules.py), which may relax it; relaxed rules are not defined over siblings, so a run whose
trees have them (width > 1) judges losslessly only, and a relaxed rule there is refused.

Draws. A tree of N nodes takes a chain's 3N + 1 uniforms (`RoundDraws.take(draws, N)`): node i
is drawn with draft[i] and judged with accept[i]; row r's correction or bonus is drawn with
(residual + [bonus])[r]. A chain drafted as a tree therefore draws exactly as the chain does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from specplay.engine.accept import (
    Array,
    Verdict,
    inverse_cdf_sample,
    lossless_acceptance,
    residual_distribution,
    tv_distance,
)
from specplay.engine.events import KEPT, DraftPosition, RoundEvent, TokenSource
from specplay.engine.layout import ROOT, chain, children, siblings_under
from specplay.engine.sampling import one_hot

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


class RowTokens(Sequence[int]):
    """A chain's row tokens, its corrections then its bonus, without drawing a correction before it
    is read (a backend may draw them lazily: only the first rejection's is used)."""

    def __init__(self, corrections: Sequence[int], bonus: int) -> None:
        self.corrections, self.bonus = corrections, bonus

    def __len__(self) -> int:
        return len(self.corrections) + 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable contents: unhashable, as a list

    @overload
    def __getitem__(self, row: int) -> int: ...

    @overload
    def __getitem__(self, row: slice) -> Sequence[int]: ...

    def __getitem__(self, row: int | slice) -> int | Sequence[int]:
        if isinstance(row, slice):
            return [self[r] for r in range(len(self))[row]]
        if row < 0:
            row += len(self)
        return self.bonus if row == len(self.corrections) else self.corrections[row]


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifiedDraft:
    """Host copy of a verified draft, a tree laid out as this file says (a chain's parents are
    -1, 0, 1, ...): per node what judging and the views read, at the node's parent row; per row
    the token that ends a round there."""

    drafted: list[int]
    parents: list[int]
    p_target: list[float]
    """p_target(x) at the node's parent row, after sampling settings, before any sibling was
    judged (one-hot at temperature 0)."""
    p_draft: list[float]
    """p_draft(x) there, likewise."""
    tv_distance: list[float]
    """d = TV(p_target, p_draft) at the node's parent row."""
    target_argmax: list[int]
    """The target's most likely token at the node's parent row (what greedy judging keeps)."""
    row_tokens: Sequence[int]
    """Per row (the root, then each node): the correction drawn from the residual left after all
    of its children lost, or where it has none, the bonus drawn from p_target (the argmax greedy).
    Only the row that ends the round is read, so a backend may draw them lazily."""
    sibling_accept: list[float] | None = None
    """Per node, the probability of keeping it once its earlier siblings lost (recursive rejection
    sampling, above); None for a draft in which no node has a sibling (a chain)."""
    correction_rank: Sequence[int | None] | None = None
    """Per row with children, its correction's rank among the drafter's tokens there (width.py's
    rule; read only at the first rejection, so it may be computed lazily); None where the
    drafter's distribution is not known."""
    tv_lower: list[float] | None = None
    """When a backend knows only the top-K of a distribution: the lower end of each node's TV
    bracket; `tv_distance` then holds the upper end, so theta = min(1, D / d) keeps the budget."""
    error_bound: list[float] | None = None
    """When only the top-K is known: a bound, in TV, on how far each node's emitted token's
    distribution may be from the rule's (None: exact)."""
    top_target: list[list[tuple[int, float]]] | None = None
    """Asked for with verify(top_n=n): the n most likely (token_id, p) of p_target at each row,
    most likely first."""
    top_draft: list[list[tuple[int, float]]] | None = None
    """Likewise for p_draft at each node's parent row, by node."""
    rule_stats: dict[str, list[float]] = field(default_factory=dict)
    """What the rule asked reads beyond d at each node, by name (its `statistics`: H(p_target) for
    typical acceptance, both maxima for cascades)."""
    tv_spent: list[float] | None = None
    """TV(pi, p_target) at each node under the rule asked, from the full distributions; None under
    mentored decoding, whose theta * d the engine computes (also from a top-K bracket)."""
    origin: str | None = None
    """The drafter's note on where its draft came from (suffix decoding: which earlier output,
    matched on how many tokens); None where it says nothing."""


def chain_verified(*, corrections: Sequence[int], bonus: int, **numbers: Any) -> VerifiedDraft:
    """A verified chain from a backend that verifies chains: its corrections and bonus become
    its row tokens."""
    parents = list(chain(len(numbers["drafted"])))
    return VerifiedDraft(parents=parents, row_tokens=RowTokens(corrections, bonus), **numbers)


def greedy_numbers(parents: Sequence[int], drafted: Sequence[int], argmax: Sequence[int]) -> VerifiedDraft:
    """Greedy judging's numbers from the target's argmax at each row: a node is kept iff it is
    its parent row's argmax (both distributions one-hot), and every row ends with its argmax."""
    at_parent = [argmax[parent + 1] for parent in parents]
    hits = [float(token == best) for token, best in zip(drafted, at_parent, strict=True)]
    return VerifiedDraft(
        drafted=list(drafted),
        parents=list(parents),
        p_target=hits,
        p_draft=[1.0] * len(drafted),
        tv_distance=[1.0 - hit for hit in hits],
        target_argmax=at_parent,
        row_tokens=list(argmax),
        sibling_accept=hits,
    )


def sampled_numbers(
    p_target: Array, p_draft: Array | None, *, parents: Sequence[int], drafted: Sequence[int], uniforms: Array, xp: Any
) -> dict[str, Array]:
    """Sampled judging's numbers from the rows [nodes + 1, vocab] of both models (p_draft zero at
    rows never expanded), as arrays: per node `p_target_x`, `p_draft_x`, `tv` and `argmax` at its
    parent row and `accept` (its probability once its earlier siblings lost: `accept[j]` holds each
    row's j-th child's); per row `row_tokens`, drawn with `uniforms` from what its children left.

    p_draft None: a proposer's tree, every node certain. Its siblings were not drawn from one
    distribution but chosen, so each is judged as a certain draft alone, p_draft one-hot on itself,
    against what the ones before it left: kept with probability p(x) of the current residual p,
    which loses x after a rejection (norm(max(p - onehot(x), 0))). Each step is a lossless step, so
    the row still emits exactly p_target; its d is TV(p_target, onehot(x)) = 1 - p_target(x)."""
    rows = children(parents)
    parent_rows = xp.array([parent + 1 for parent in parents])
    nodes = xp.array(list(drafted))[:, None]
    p_target_x = xp.take_along_axis(p_target[parent_rows], nodes, axis=-1)[:, 0]
    if p_draft is None:
        p_draft_x, tv = xp.ones_like(p_target_x), 1.0 - p_target_x
    else:
        p_draft_x = xp.take_along_axis(p_draft[parent_rows], nodes, axis=-1)[:, 0]
        tv = tv_distance(p_target, p_draft)[parent_rows]
    argmax = xp.argmax(p_target, axis=-1)[parent_rows]
    out = {"p_target_x": p_target_x, "p_draft_x": p_draft_x, "tv": tv, "argmax": argmax}
    accepts = []
    for j in range(max(len(r) for r in rows)):  # the j-th sibling of every row at once
        has = xp.array([j < len(r) for r in rows])[:, None]
        tokens = xp.array([drafted[r[j]] if j < len(r) else 0 for r in rows])
        judged_against = one_hot(tokens, p_target.shape[-1], xp) if p_draft is None else p_draft
        accept, p_next, q_next = sibling_step(p_target, judged_against, tokens, xp)
        accepts.append(accept)
        p_target = xp.where(has, p_next, p_target)
        if p_draft is not None:
            p_draft = xp.where(has, q_next, p_draft)
    out["accept"] = xp.stack(accepts)
    out["row_tokens"] = inverse_cdf_sample(p_target, uniforms, xp)
    return out


def sampled_tree(parents: Sequence[int], drafted: Sequence[int], host: dict[str, list[Any]]) -> VerifiedDraft:
    """A VerifiedDraft from `sampled_numbers`' arrays on the host (as lists)."""
    accept = [0.0] * len(drafted)
    for row, nodes in enumerate(children(parents)):
        for j, node in enumerate(nodes):
            accept[node] = host["accept"][j][row]
    return VerifiedDraft(
        drafted=list(drafted),
        parents=list(parents),
        p_target=host["p_target_x"],
        p_draft=host["p_draft_x"],
        tv_distance=host["tv"],
        target_argmax=host["argmax"],
        row_tokens=host["row_tokens"],
        sibling_accept=accept,
    )


def row_uniforms(residual: Sequence[float], bonus: float, nodes: int) -> list[float]:
    """Row r's uniform: residual[r], the bonus's after the last (tree.py's draws)."""
    return [*residual, bonus][: nodes + 1]


def sibling_verdict(probability: float, uniform: float, greedy: bool) -> Verdict:
    """A node judged among siblings (above): kept iff u < its probability once its earlier siblings
    lost, which is 1 or 0 greedy. Lossless, so nothing is relaxed and no TV is spent."""
    return Verdict(
        accepted=uniform < probability, relaxed=False, theta=0.0, probability=None if greedy else probability
    )


@dataclass(frozen=True, slots=True)
class Walk:
    """A judged draft, walked from the root."""

    verdicts: tuple[Verdict | None, ...]
    """Per node: its verdict, None where the walk never reached it."""
    committed: tuple[tuple[int, TokenSource], ...]
    """The round's tokens: the kept path, then the correction or bonus (unless an EOS or the
    token limit ended it)."""
    row: int
    """The row the walk ended at: after the kept path (where its correction or bonus was drawn)."""


def walk(
    parents: Sequence[int],
    drafted: Sequence[int],
    *,
    judge_node: Callable[[int, bool], Verdict],
    row_tokens: Sequence[int],
    limit: int,
    stops: Callable[[int], bool],
) -> Walk:
    """From the root: at each row its children are judged in order (`judge_node(node, has_siblings)`)
    until one is kept, which becomes the current row; where none is, the row's token (correction,
    bonus at a leaf, the target's own token where nothing was drafted) ends the round. `stops(token)`:
    an EOS that ends the output; at most `limit` tokens."""
    rows = children(parents)
    verdicts: list[Verdict | None] = [None] * len(drafted)
    committed: list[tuple[int, TokenSource]] = []
    row = 0
    while True:
        kept = None
        for node in rows[row]:
            verdict = verdicts[node] = judge_node(node, len(rows[row]) > 1)
            if verdict.accepted:
                kept = node
                break
        if kept is None:
            source: TokenSource = "corrected" if rows[row] else ("bonus" if row else "target")
            committed.append((row_tokens[row], source))
            break
        verdict = verdicts[kept]
        committed.append((drafted[kept], "relaxed" if verdict is not None and verdict.relaxed else "accepted"))
        if stops(drafted[kept]) or len(committed) == limit:
            break
        row = kept + 1
    return Walk(verdicts=tuple(verdicts), committed=tuple(committed), row=row)


def kept_nodes(event: RoundEvent) -> list[int]:
    """A round's kept nodes in order: its path from the root (breadth first, so by depth)."""
    return [i for i, position in enumerate(event.positions) if position.outcome in KEPT]


def judged_at(event: RoundEvent, slot: int) -> DraftPosition | None:
    """The drafted position the round's slot-th committed token was judged at: the kept node at
    that depth, and for the token after them (a correction) the first of the last row's children
    that lost; None for a bonus, and where the round holds no positions (a speculating server's)."""
    path = kept_nodes(event)
    if slot < len(path):
        return event.positions[path[slot]]
    if not event.positions:  # the server judged its own draft: no position to point at
        return None
    row = path[-1] if path else ROOT
    lost = [n for n in siblings_under(event.parents, row) if event.positions[n].outcome == "rejected"]
    return event.positions[lost[0]] if lost else None
