"""Draft trees' rules (engine/tree.py): the exact output distribution of judging siblings, the
shape of a level, the walk down a judged tree, and the refusals where trees cannot run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specplay.engine.accept import Verdict, lossless_acceptance, residual_distribution
from specplay.engine.capabilities import Capabilities, check_supported
from specplay.engine.layout import ROOT, children, depths
from specplay.engine.settings import SpecSettings
from specplay.engine.tree import (
    Walk,
    draw_siblings,
    kept_path,
    level_counts,
    sampled_numbers,
    sees,
    sibling_step,
    sibling_verdict,
    tree_shape,
    walk,
)
from specplay.errors import ConfigError
from tests.support.distributions import random_pairs


def row_output(p_target: np.ndarray, p_draft: np.ndarray, siblings: int, remove_drawn: bool = True) -> np.ndarray:
    """The exact distribution of the token a row emits when `siblings` children are drawn
    without replacement from p_draft and judged in order (tree.py), summed over every ordered
    draw. `remove_drawn` False judges them as if each were drawn from the whole p_draft: the
    negative control."""
    out = np.zeros_like(p_target)
    vocab = len(p_target)
    for drawn in itertools.permutations(range(vocab), siblings):
        chance, q_left = 1.0, p_draft.copy()
        for x in drawn:  # the chance of drawing this ordered sequence
            chance *= q_left[x] / q_left.sum() if q_left.sum() > 0 else 0.0
            q_left[x] = 0.0
        if chance == 0:
            continue
        reach, p_now, q_now = 1.0, p_target.copy(), p_draft.copy()
        for x in drawn:
            accept, p_next, q_next = sibling_step(p_now[None], q_now[None], np.array([x]), np)
            out[x] += chance * reach * float(accept[0])
            reach *= 1 - float(accept[0])
            p_now = p_next[0]
            q_now = q_next[0] if remove_drawn else residual_distribution(q_now, np.zeros_like(q_now), np)
        out += chance * reach * p_now
    return out


@pytest.mark.parametrize("siblings", [1, 2, 3])
def test_judging_siblings_emits_exactly_p_target(siblings: int) -> None:
    for p_target, p_draft in random_pairs(12, vocab=5, seed=siblings):
        if np.count_nonzero(p_draft) < siblings:
            continue
        np.testing.assert_allclose(row_output(p_target, p_draft, siblings), p_target, atol=1e-12)


def test_judging_siblings_as_if_drawn_with_replacement_is_not_exact() -> None:
    """The control: keeping each sibling's p_draft whole after a rejection biases the output."""
    worst = max(
        np.abs(row_output(p_target, p_draft, 3, remove_drawn=False) - p_target).max()
        for p_target, p_draft in random_pairs(12, vocab=5, seed=3)
        if np.count_nonzero(p_draft) >= 3
    )
    assert worst > 0.01


def test_the_first_sibling_is_judged_as_a_chain_is() -> None:
    for p_target, p_draft in random_pairs(6, vocab=7):
        x = int(np.argmax(p_draft))
        accept, p_next, _ = sibling_step(p_target[None], p_draft[None], np.array([x]), np)
        assert accept[0] == lossless_acceptance(p_target[x], p_draft[x], np)
        np.testing.assert_allclose(p_next[0], residual_distribution(p_target, p_draft, np))


GRID = 800
"""Uniforms spread evenly over [0, 1): the token a row draws from what its children left, read
over them, is that distribution within a step of the grid."""


def certain_row_output(p_target: np.ndarray, siblings: list[int], p_draft: np.ndarray | None = None) -> np.ndarray:
    """The exact distribution of the token a row emits when certain siblings (a proposer's: chosen,
    not drawn) are judged in turn by `sampled_numbers` with no p_draft; given `p_draft` (the control),
    judged as if they had been drawn from it."""
    rows = np.repeat(p_target[None], len(siblings) + 1, axis=0)
    drafts = None if p_draft is None else np.repeat(p_draft[None], len(siblings) + 1, axis=0)
    out, reach = np.zeros_like(p_target), 1.0

    def numbers(u: float) -> dict[str, np.ndarray]:
        parents = [ROOT] * len(siblings)
        uniforms = np.full(len(siblings) + 1, u)
        return sampled_numbers(rows, drafts, parents=parents, drafted=siblings, uniforms=uniforms, xp=np)

    for j, x in enumerate(siblings):
        accept = float(numbers(0.5)["accept"][j][0])
        out[x] += reach * accept
        reach *= 1 - accept
    for u in (np.arange(GRID) + 0.5) / GRID:  # the correction, drawn from the last residual
        out[int(numbers(float(u))["row_tokens"][0])] += reach / GRID
    return out


@pytest.mark.parametrize("siblings", [1, 2, 3])
def test_certain_siblings_judged_in_turn_emit_exactly_p_target(siblings: int) -> None:
    """A proposer's tree (suffix decoding): each sibling one-hot on itself, kept with probability
    p(x) of what the ones before left. Every p_target, any choice of distinct siblings."""
    rng = np.random.default_rng(siblings)
    for p_target, _ in random_pairs(9, vocab=6, seed=siblings):
        chosen = [int(t) for t in rng.choice(6, siblings, replace=False)]
        np.testing.assert_allclose(certain_row_output(p_target, chosen), p_target, atol=2 / GRID)
        numbers = sampled_numbers(
            p_target[None].repeat(siblings + 1, 0),
            None,
            parents=[ROOT] * siblings,
            drafted=chosen,
            uniforms=np.full(siblings + 1, 0.5),
            xp=np,
        )
        assert float(numbers["accept"][0][0]) == pytest.approx(p_target[chosen[0]])  # the first, as a chain's
        np.testing.assert_allclose(numbers["p_draft_x"], 1.0)
        np.testing.assert_allclose(numbers["tv"], 1 - p_target[chosen])


def test_certain_siblings_judged_as_if_drawn_are_not_exact() -> None:
    """The control: judging chosen siblings as draws from a distribution spread over them (as a
    model's siblings are judged) biases the output."""
    worst = 0.0
    for p_target, _ in random_pairs(9, vocab=6, seed=7):
        spread = np.zeros(6)
        spread[[0, 1, 2]] = 1 / 3
        output = certain_row_output(p_target, [0, 1, 2], p_draft=spread)
        worst = max(worst, float(np.abs(output - p_target).max()))
    assert worst > 0.05


def test_siblings_are_drawn_without_replacement() -> None:
    q = np.array([[0.5, 0.3, 0.2, 0.0]])
    drawn = draw_siblings(q, [np.array([0.1]), np.array([0.1]), np.array([0.1])], np)
    assert sorted(int(d[0]) for d in drawn) == [0, 1, 2]  # three distinct tokens, never the one with no mass


def test_a_level_gives_its_children_to_the_most_confident_slots() -> None:
    # Two nodes, path confidence times their top-3 probabilities: node 0 is sure, node 1 is not.
    slots = [[0.9 * 0.95, 0.9 * 0.03, 0.9 * 0.01], [0.3 * 0.4, 0.3 * 0.35, 0.3 * 0.2]]
    assert level_counts(slots, 3) == [1, 2]
    assert level_counts(slots, 1) == [1, 0]
    assert level_counts([[0.5, 0.0, 0.0]], 3) == [1]  # a slot with no probability is never filled


def test_the_layout() -> None:
    parents = [ROOT, ROOT, 0, 0, 1, 2]
    assert depths(parents) == [1, 1, 2, 2, 2, 3]
    assert children(parents) == [[0, 1], [2, 3], [4], [5], [], [], []]
    assert sees(parents)[5] == [True, False, True, False, False, True]
    assert tree_shape(2, 0, 4).nodes == 8 and tree_shape(2, 3, 4).depth == 3


def test_the_walk_keeps_the_first_sibling_under_its_probability() -> None:
    #        root
    #       /    \
    #   0:"a"   1:"b"
    #   /   \       \
    # 2:"c" 3:"d"   4:"e"
    parents, drafted = [ROOT, ROOT, 0, 0, 1], [10, 11, 12, 13, 14]
    row_tokens = [90, 91, 92, 93, 94, 95]

    def walked(accept: list[float], limit: int = 10) -> Walk:
        def judge_node(node: int, has_siblings: bool) -> Verdict:
            return sibling_verdict(accept[node], 0.5, greedy=False)

        return walk(parents, drafted, judge_node=judge_node, row_tokens=row_tokens, limit=limit, stops=lambda t: False)

    def outcomes(walk: Walk) -> tuple[str | None, ...]:
        return tuple(None if v is None else "accepted" if v.accepted else "rejected" for v in walk.verdicts)

    verdict = walked([0.0, 1.0, 1.0, 1.0, 1.0])
    # 0 loses, 1 is kept, its only child 4 is kept, and 4 is a leaf: its row's token is a bonus.
    assert outcomes(verdict) == ("rejected", "accepted", None, None, "accepted")
    assert verdict.committed == ((11, "accepted"), (14, "accepted"), (95, "bonus"))
    assert kept_path(parents, drafted, [11, 14, 95]) == [1, 4]

    lost = walked([1.0, 1.0, 0.2, 0.1, 1.0])
    assert lost.committed == ((10, "accepted"), (91, "corrected"))  # both children of 0 lost: its row (1) corrects
    assert outcomes(lost) == ("accepted", None, "rejected", "rejected", None)
    assert kept_path(parents, drafted, [10, 91]) == [0]

    assert walked([1.0] * 5, limit=1).committed == ((10, "accepted"),)


def test_trees_are_refused_where_they_cannot_run() -> None:
    tree = SpecSettings(width=2)
    with pytest.raises(ConfigError, match="draft trees cannot run here"):
        check_supported(tree, Capabilities())
    check_supported(tree, Capabilities(trees=True))
    relaxed = tree.changed(tv_budget=0.2)
    with pytest.raises(ConfigError, match="judged losslessly only") as refused:
        check_supported(relaxed, Capabilities(trees=True))
    assert "\n" not in str(refused.value)
    # Typical acceptance has no lossless value of its knob: refused in one line all the same.
    with pytest.raises(ConfigError, match="use the lossless rule") as typical:
        check_supported(tree.changed(rule="typical"), Capabilities(trees=True))
    assert "\n" not in str(typical.value)
    # A chain under a node budget judges by any rule: width 1 is no tree to refuse.
    check_supported(SpecSettings(width=1, tree_nodes=6).changed(tv_budget=0.2), Capabilities(trees=True))
    with pytest.raises(ConfigError, match="width"):
        SpecSettings(width=9)
    with pytest.raises(ConfigError, match="counterfactual"):
        check_supported(tree.changed(counterfactual=True), Capabilities(trees=True, counterfactual=True))
