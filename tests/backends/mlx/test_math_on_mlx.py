"""The engine's acceptance and sampling math run on MLX, in float32, against numpy's: the same
formulas (written once, for any `xp`) give the same numbers on the device."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specplay.engine.accept import inverse_cdf_sample, residual_distribution, tv_distance
from specplay.engine.rules import AcceptanceRule
from specplay.engine.sampling import sampling_probs
from specplay.engine.settings import SamplingParams
from tests.support.distributions import RELAXED, random_pairs


def test_inverse_cdf_sample_on_mlx_hits_each_token_in_proportion() -> None:
    probs = np.array([0.25, 0.0, 0.5, 0.125, 0.125], dtype=np.float32)
    uniforms = (np.arange(8000, dtype=np.float32) + 0.5) / 8000  # a fine grid of [0, 1)
    rows = np.tile(probs, (len(uniforms), 1))
    drawn = np.array(inverse_cdf_sample(mx.array(rows), mx.array(uniforms), mx))
    np.testing.assert_allclose(np.bincount(drawn, minlength=5) / len(uniforms), probs, atol=1e-3)
    # The extremes of the uniform never land on a zero-probability token.
    edges = np.array(inverse_cdf_sample(mx.array(probs[None].repeat(2, 0)), mx.array([0.0, 0.9999999]), mx))
    assert set(edges.tolist()) <= {0, 2, 3, 4}


def test_mlx_and_numpy_agree() -> None:
    for p_target, p_draft in random_pairs(10, 64, seed=4):
        pt32, pd32 = p_target.astype(np.float32), p_draft.astype(np.float32)
        np.testing.assert_allclose(
            np.array(tv_distance(mx.array(pt32), mx.array(pd32))), tv_distance(pt32, pd32), rtol=1e-5
        )
        np.testing.assert_allclose(
            np.array(residual_distribution(mx.array(pt32), mx.array(pd32), mx)),
            residual_distribution(pt32, pd32, np),
            atol=1e-6,
        )


@pytest.mark.parametrize("rule", RELAXED, ids=repr)
def test_mlx_computes_the_same_rows_in_float32(rule: AcceptanceRule) -> None:
    for p_target, p_draft in random_pairs(8, 64, seed=7):
        pt32, pd32 = p_target.astype(np.float32)[None], p_draft.astype(np.float32)[None]
        expected = rule.tv_spent(p_target[None], p_draft[None], np)
        got = np.array(rule.tv_spent(mx.array(pt32), mx.array(pd32), mx))
        np.testing.assert_allclose(got, expected, atol=2e-5)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(1.0),
        SamplingParams(0.7, top_p=0.9),
        SamplingParams(1.3, top_k=20, min_p=0.05),
        SamplingParams(0.0),
    ],
)
def test_mlx_matches_numpy(params: SamplingParams) -> None:
    logits = np.random.default_rng(0).normal(size=(3, 300)).astype(np.float32) * 3
    ours = np.array(sampling_probs(mx.array(logits), params, mx))
    reference = np.array(sampling_probs(logits, params, np))
    np.testing.assert_allclose(ours, reference, atol=1e-6)
    np.testing.assert_allclose(ours.sum(axis=-1), 1.0, atol=1e-5)
