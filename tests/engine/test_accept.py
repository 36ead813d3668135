"""Exact checks of the acceptance rules: the output distribution each rule produces, in float64."""

from __future__ import annotations

import numpy as np
import pytest

from specplay.engine.accept import (
    SCALARS,
    Verdict,
    greedy_accept,
    inverse_cdf_sample,
    judge,
    lossless_accept_probability,
    residual_distribution,
    tv_distance,
)
from specplay.engine.rules import MENTORED, AcceptanceRule, Mentored, mentored_distribution, mentored_theta
from tests.support.checks import every
from tests.support.distributions import random_pairs

BUDGETS = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0]


def mentored(budget: float) -> Mentored:
    return Mentored(tv_budget=budget)


def mentored_accept_probability(p_target_x: float, p_draft_x: float, tv: float, budget: float) -> float:
    return mentored(budget).accept_probability(p_target_x, p_draft_x, {"tv": tv})


def judged(
    rule: AcceptanceRule, x: int, p_target_x: float, p_draft_x: float, tv: float, argmax: int, greedy: bool, u: float
) -> Verdict:
    return judge(
        rule,
        greedy=greedy,
        token_id=x,
        target_argmax=argmax,
        p_target_x=p_target_x,
        p_draft_x=p_draft_x,
        stats={"tv": tv},
        uniform=u,
    )


def acceptance_probabilities(p_target: np.ndarray, p_draft: np.ndarray, budget: float) -> np.ndarray:
    d = float(tv_distance(p_target, p_draft))
    return np.array([mentored_accept_probability(pt, pd, d, budget) for pt, pd in zip(p_target, p_draft, strict=True)])


def output_distribution(p_target: np.ndarray, p_draft: np.ndarray, budget: float) -> np.ndarray:
    """What one drafted position emits: x ~ p_draft kept with its acceptance probability,
    else a draw from the residual."""
    accept = acceptance_probabilities(p_target, p_draft, budget)
    kept = p_draft * accept
    return kept + (1.0 - kept.sum()) * residual_distribution(p_target, p_draft, np)


@pytest.mark.parametrize("budget", BUDGETS)
def test_output_distribution_is_target_at_zero_budget_and_pi_above(budget: float) -> None:
    for p_target, p_draft in random_pairs(300, 40):
        d = float(tv_distance(p_target, p_draft))
        theta = mentored_theta(d, budget)
        pi = mentored_distribution(p_target, p_draft, theta)
        out = output_distribution(p_target, p_draft, budget)
        np.testing.assert_allclose(out, pi, atol=1e-12)
        if budget == 0:
            np.testing.assert_allclose(out, p_target, atol=1e-12)
        # The budget holds exactly: the output moves min(d, D) from the target, no more.
        assert float(tv_distance(out, p_target)) == pytest.approx(min(d, budget), abs=1e-12)
        # Acceptance rises from 1 - d (lossless) to 1 - max(0, d - D).
        acceptance = float((p_draft * acceptance_probabilities(p_target, p_draft, budget)).sum())
        assert acceptance == pytest.approx(1 - max(0.0, d - budget), abs=1e-12)


def test_zero_budget_is_exactly_lossless() -> None:
    for p_target, p_draft in random_pairs(50, 30, seed=1):
        d = float(tv_distance(p_target, p_draft))
        for pt, pd in zip(p_target, p_draft, strict=True):
            assert mentored_accept_probability(pt, pd, d, 0.0) == lossless_accept_probability(pt, pd)
            # Past the shortcut a lossless knob takes: the formula itself at D = 0.
            assert mentored(0.0).acceptance(pt, pd, {"tv": d}, SCALARS) == lossless_accept_probability(pt, pd)


def test_judge_at_zero_budget_makes_the_lossless_decision_for_every_draw() -> None:
    rng = np.random.default_rng(2)
    for p_target, p_draft in random_pairs(20, 30, seed=2):
        d = float(tv_distance(p_target, p_draft))
        for x in range(30):
            u = float(rng.random())
            verdict = judged(MENTORED, x, p_target[x], p_draft[x], d, int(p_target.argmax()), False, u)
            assert verdict.accepted == (u < lossless_accept_probability(p_target[x], p_draft[x]))
            assert not verdict.relaxed


def test_budget_acceptances_are_those_lossless_would_reject() -> None:
    p_target, p_draft = np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.3, 0.6])  # d = 0.6
    x, budget = 2, 0.3  # theta = 0.5, pi(x) = 0.35: lossless accepts u < 1/6, mentored u < 7/12
    d = float(tv_distance(p_target, p_draft))
    for u, accepted, relaxed in [(0.1, True, False), (0.3, True, True), (0.58, True, True), (0.6, False, False)]:
        verdict = judged(mentored(budget), x, p_target[x], p_draft[x], d, 0, False, u)
        assert (verdict.accepted, verdict.relaxed) == (accepted, relaxed)
        assert verdict.theta == pytest.approx(0.5)


def test_identical_distributions_accept_everything() -> None:
    p = np.array([0.5, 0.3, 0.2, 0.0])
    assert float(tv_distance(p, p)) == 0.0
    assert mentored_theta(0.0, 0.0) == 1.0
    assert every(lossless_accept_probability(x, x) == 1.0 for x in p[:3])
    np.testing.assert_array_equal(residual_distribution(p, p, np), p)  # no residual mass: stays a distribution


def test_zero_draft_probability() -> None:
    # A token the drafter gives no mass is never drafted; the rule stays total and sensible.
    assert lossless_accept_probability(0.3, 0.0) == 1.0
    assert lossless_accept_probability(0.0, 0.0) == 0.0
    assert lossless_accept_probability(0.0, 0.4) == 0.0
    p_target, p_draft = np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5])
    np.testing.assert_allclose(residual_distribution(p_target, p_draft, np), [1.0, 0.0, 0.0])


def test_greedy_is_the_one_hot_case_and_budget_accepts_mismatch_with_probability_d() -> None:
    assert greedy_accept(5, 5) and not greedy_accept(5, 6)
    # One-hot distributions: a mismatch has d = 1, theta = D, pi(x) = D, p_draft(x) = 1.
    for budget in BUDGETS:
        assert mentored_accept_probability(0.0, 1.0, 1.0, budget) == pytest.approx(budget)
        assert mentored_accept_probability(1.0, 1.0, 0.0, budget) == 1.0
    verdict = judged(mentored(0.4), 3, 0.0, 1.0, 1.0, 7, True, 0.39)
    assert verdict.accepted and verdict.relaxed
    assert not judged(mentored(0.4), 3, 0.0, 1.0, 1.0, 7, True, 0.41).accepted
    assert not judged(MENTORED, 3, 0.0, 1.0, 1.0, 7, True, 0.0).accepted


@pytest.mark.parametrize("xp", [np], ids=["numpy"])
def test_inverse_cdf_sample_hits_each_token_in_proportion(xp: object) -> None:
    probs = np.array([0.25, 0.0, 0.5, 0.125, 0.125], dtype=np.float32)
    uniforms = (np.arange(8000, dtype=np.float32) + 0.5) / 8000  # a fine grid of [0, 1)
    rows = np.tile(probs, (len(uniforms), 1))
    drawn = np.array(inverse_cdf_sample(xp.array(rows), xp.array(uniforms), xp))
    np.testing.assert_allclose(np.bincount(drawn, minlength=5) / len(uniforms), probs, atol=1e-3)
    # The extremes of the uniform never land on a zero-probability token.
    edges = np.array(inverse_cdf_sample(xp.array(probs[None].repeat(2, 0)), xp.array([0.0, 0.9999999]), xp))
    assert set(edges.tolist()) <= {0, 2, 3, 4}
