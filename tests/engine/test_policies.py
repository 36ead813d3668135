"""Draft-length policies, step by step."""

from __future__ import annotations

import pytest

from specplay.engine.policies import make_policy
from specplay.engine.settings import PolicyParams, SpecSettings
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
