"""Draft-length policies, step by step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specplay.engine.policies import RoundTimes, best_k, make_policy
from specplay.engine.settings import PolicyParams, SpecSettings
from specplay.engine.tree import verify_rows
from specplay.errors import ConfigError

PARAMS = PolicyParams()


def test_fixed_never_moves() -> None:
    policy = make_policy("fixed", 5, PARAMS)
    for drafted, accepted in [(5, 0), (5, 5), (5, 2)]:
        policy.update(drafted, accepted)
        assert policy.propose() == 5


def test_acceptance_rate_steps_and_bounds() -> None:
    policy = make_policy("acceptance-rate", 4, PARAMS)
    trace = []
    for drafted, accepted in [(4, 4), (5, 5), (6, 6), (7, 7), (8, 8), (8, 8), (8, 1), (7, 0), (6, 3)]:
        policy.update(drafted, accepted)
        trace.append(policy.propose())
    # > 0.8 grows to the bound 8; < 0.4 shrinks; 3/6 = 0.5 holds.
    assert trace == [5, 6, 7, 8, 8, 8, 7, 6, 6]
    policy = make_policy("acceptance-rate", 2, PARAMS)
    for _ in range(3):
        policy.update(2, 0)
    assert policy.propose() == 1
    policy.update(5, 2)  # exactly 0.4: boundary values leave k alone
    assert policy.propose() == 1


def test_accepted_length_ema() -> None:
    policy = make_policy("accepted-length", 4, PARAMS)  # s0 = 3
    expected_ema, trace = 3.0, []
    for accepted in [0, 0, 0, 8, 8]:
        policy.update(4, accepted)
        expected_ema = 0.2 * accepted + 0.8 * expected_ema
        trace.append(policy.propose())
        assert policy.ema == pytest.approx(expected_ema)
    # s: 2.4, 1.92, 1.536, 2.8288, 3.863 -> round + 1: 3, 3, 3, 4, 5
    assert trace == [3, 3, 3, 4, 5]


def test_accepted_length_rounds_half_up_and_clamps() -> None:
    policy = make_policy("accepted-length", 1, PolicyParams(ema_alpha=1.0, k_max=6))
    policy.update(4, 1.5)  # type: ignore[arg-type]  # s = 1.5 -> 2 -> k 3
    assert policy.propose() == 3
    policy.update(8, 8)
    assert policy.propose() == 6


def test_confidence_stops_when_rejection_looks_likely() -> None:
    policy = make_policy("confidence", 6, PolicyParams(k_min=2, confidence_threshold=0.5))
    assert policy.stops_early and policy.propose() == 6
    assert policy.keep_drafting([0.1])  # below k_min: always continue
    assert policy.keep_drafting([0.9, 0.8])  # 1 - 0.72 = 0.28
    assert not policy.keep_drafting([0.9, 0.8, 0.6])  # 1 - 0.432 = 0.568 > 0.5


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"k": 0}, "k"),
        ({"k": 65}, "k"),
        ({"tv_budget": -0.1}, "tv_budget"),
        ({"tv_budget": 1.5}, "tv_budget"),
        ({"policy": "magic"}, "policy"),
    ],
)
def test_out_of_range_settings(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        SpecSettings().changed(**kwargs)
    assert error.value.field == field


def test_policy_params_are_checked() -> None:
    with pytest.raises(ConfigError, match="k_max"):
        PolicyParams(k_min=4, k_max=3)
    with pytest.raises(ConfigError, match="high_acceptance"):
        PolicyParams(low_acceptance=0.8, high_acceptance=0.5)


# --- the cost-aware policy ----------------------------------------------------------------------


def rounds_of_cost_policy(step_ms: float, accepts: int, rounds: int = 60, k: int = 4) -> list[int]:
    """The cost policy's k over `rounds` rounds whose times follow a fixed model: the verify pass
    over r rows 10 + 2 r ms, drafting 1 ms a call and `step_ms` a token, 1 ms of host work; every
    round keeps exactly `accepts` drafted tokens (or all, if it drafted fewer)."""
    policy = make_policy("cost", k, PolicyParams(k_max=8))
    chosen = []
    for _ in range(rounds):
        k = policy.propose()
        chosen.append(k)
        times = RoundTimes(draft_ms=1.0 + step_ms * k if k else 0.0, verify_ms=10 + 2 * (k + 1), host_ms=1.0)
        policy.update(k, min(k, accepts), times)
    return chosen


def test_cost_policy_finds_the_hand_computed_k() -> None:
    """Three tokens kept every round, a 3 ms drafter step: a round of k >= 1 costs 1 + 3k (draft)
    + 12 + 2k (verify) + 1 (host) = 14 + 5k ms and commits 1 + min(k, 3) tokens; k = 0 costs
    12 + 1 = 13 ms for one. Tokens per ms: k 0 0.077, 1 0.105, 2 0.125, 3 0.138, 4 0.118, 5 0.103:
    k = 3. It probes k and k_max first (two points of each line), then a neighbour every fourth round."""
    chosen = rounds_of_cost_policy(step_ms=3.0, accepts=3)
    assert chosen[:2] == [4, 8]
    settled = chosen[4:]
    assert settled.count(3) >= 0.7 * len(settled), chosen
    assert set(settled) <= {2, 3, 4}


def test_cost_policy_stops_speculating_where_drafting_is_too_dear() -> None:
    """A 20 ms drafter step: a round of k costs 14 + 22k ms for at most 1 + min(k, 3) tokens: k 1
    0.056, 2 0.052, 3 0.050 tokens per ms, below k = 0's 1 / 13 = 0.077: no speculation."""
    chosen = rounds_of_cost_policy(step_ms=20.0, accepts=3)
    settled = chosen[4:]
    assert settled.count(0) >= 0.8 * len(settled), chosen
    assert set(settled) <= {0, 1}


def test_cost_policy_charges_a_tree_the_rows_it_verifies() -> None:
    """Trees of width 2 (a round of depth k verifies 2k + 1 rows), the verify pass over r rows
    10 + 10 r ms, drafting 1 + 3k ms (a level a pass), 1 ms of host work, three tokens kept a
    round. Depth k >= 1 costs 1 + 3k + 10 + 10 (2k + 1) + 1 = 22 + 23k ms for 1 + min(k, 3)
    tokens: k 1 0.044, 2 0.044, 3 0.044 tokens per ms, all below k = 0's 1 / 21 = 0.048: no
    speculation. Charged a chain's k + 1 rows instead, as a policy that knew no trees would be,
    k 3 costs 22 + 13 x 3 = 61 ms for 4 tokens (0.066) and wins."""

    def settled(width: int) -> list[int]:
        policy = make_policy("cost", 4, PolicyParams(k_max=8), width=width)
        chosen = []
        for _ in range(60):
            k = policy.propose()
            chosen.append(k)
            rows = verify_rows(2, 0, k)  # the rounds draft trees of width 2 whatever the policy knows
            times = RoundTimes(draft_ms=1.0 + 3 * k if k else 0.0, verify_ms=10 + 10 * rows, host_ms=1.0)
            policy.update(k, min(k, 3), replace(times, verify_rows=rows))
        return chosen[4:]

    trees = settled(width=2)
    assert trees.count(0) >= 0.8 * len(trees), trees
    chains = settled(width=1)  # the negative control: the same rounds read as chains
    assert chains.count(3) >= 0.6 * len(chains), chains


def test_best_k_by_hand() -> None:
    """Kept share 0.5^i, the verify pass flat at 10 ms, no host work. Drafting free (prompt lookup
    drafting all it is asked): tokens per ms grow with k, so k_max. A 10 ms step: k 1 gives
    1.5 tokens in 20 ms (0.075 a ms), k 2 1.75 in 30, each k below k = 0's 1 in 10 (0.1)."""
    kept = [0.5**i for i in range(1, 9)]
    flat = {rows: 10.0 for rows in range(1, 10)}
    free = {"draft_call_ms": 0.0, "host_ms": 0.0, "k_max": 8}
    assert best_k(kept, [1.0] * 8, flat, draft_step_ms=0.0, **free) == 8
    assert best_k(kept, [1.0] * 8, flat, draft_step_ms=10.0, **free) == 0
    # A drafter that never drafts past position 2 (lookup finding short matches): no k beyond 2
    # gains a token or costs a row more, and the smaller k wins the tie.
    short = [0.5, 0.25, *[0.0] * 6]
    assert best_k(short, [1.0, 1.0, *[0.0] * 6], flat, draft_step_ms=0.0, **free) == 2


def test_cost_policy_through_the_engine_against_every_fixed_k() -> None:
    """On the scripted backend, whose clock charges each forward pass exactly: within 5% of the
    best fixed k (or of no speculation, where that is faster) with drafters that pay, and within
    10% where every k loses (what it pays is its probes: k_max once, and tries as evidence fades)."""
    from tests.support.engine_runs import done, run
    from tests.support.scripted import scripted_backend

    prompt = "the keeper climbed the stairs. " * 3

    def tokens_per_s(**settings: object) -> float:
        return done(run(scripted_backend(), prompt, max_tokens=200, **settings)).metrics["tokens_per_s"]

    no_speculation = tokens_per_s(route="none")
    for drafter, floor in (("near", 0.95), ("lookup", 0.95), ("self", 0.95), ("far", 0.9)):
        best = max(no_speculation, *(tokens_per_s(route=drafter, k=k) for k in range(1, 9)))
        assert tokens_per_s(route=drafter, k=4, policy="cost") >= floor * best, drafter
