"""Sampling settings turn logits into the distribution both models are sampled and judged by."""

from __future__ import annotations

import numpy as np
import pytest

from specplay.engine.draws import BLOCK, Draws
from specplay.engine.sampling import sampling_probs
from specplay.engine.settings import SamplingParams
from specplay.errors import ConfigError

LOGITS = np.log(np.array([[0.4, 0.3, 0.15, 0.1, 0.05]], dtype=np.float32))


def probs(params: SamplingParams, xp=np) -> np.ndarray:
    return np.array(sampling_probs(xp.array(LOGITS), params, xp))[0]


def test_temperature_one_is_the_softmax() -> None:
    np.testing.assert_allclose(probs(SamplingParams(temperature=1.0)), [0.4, 0.3, 0.15, 0.1, 0.05], rtol=1e-6)


def test_temperature_sharpens_and_flattens() -> None:
    base = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    for temperature in (0.5, 2.0):
        expected = base ** (1 / temperature) / (base ** (1 / temperature)).sum()
        np.testing.assert_allclose(probs(SamplingParams(temperature=temperature)), expected, rtol=1e-5)


def test_greedy_is_one_hot_at_the_first_argmax() -> None:
    np.testing.assert_array_equal(probs(SamplingParams(temperature=0.0)), [1, 0, 0, 0, 0])
    tied = np.array(sampling_probs(np.array([[1.0, 3.0, 3.0]]), SamplingParams(), np))[0]
    np.testing.assert_array_equal(tied, [0, 1, 0])


def test_top_k_top_p_min_p() -> None:
    np.testing.assert_allclose(probs(SamplingParams(1.0, top_k=2)), [4 / 7, 3 / 7, 0, 0, 0], rtol=1e-6)
    # top-p 0.7: 0.4 + 0.3 reaches it, so the set stops there; 0.71 needs the third token.
    np.testing.assert_allclose(probs(SamplingParams(1.0, top_p=0.7)), [4 / 7, 3 / 7, 0, 0, 0], rtol=1e-5)
    np.testing.assert_allclose(
        probs(SamplingParams(1.0, top_p=0.71)), [0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0], rtol=1e-5
    )
    # min-p 0.3: keep p >= 0.3 * 0.4 = 0.12.
    np.testing.assert_allclose(
        probs(SamplingParams(1.0, min_p=0.3)), [0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0], rtol=1e-5
    )
    # Applied in order: top-k 3 renormalises, then top-p 0.5 over 0.47, 0.35, 0.18 keeps two.
    np.testing.assert_allclose(probs(SamplingParams(1.0, top_k=3, top_p=0.5)), [4 / 7, 3 / 7, 0, 0, 0], rtol=1e-5)


def test_ties_at_the_boundary_are_kept() -> None:
    logits = np.log(np.array([[0.4, 0.2, 0.2, 0.2]]))
    kept = np.array(sampling_probs(logits, SamplingParams(1.0, top_k=2), np))[0]
    np.testing.assert_allclose(kept, [0.4, 0.2, 0.2, 0.2], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"min_p": 1.0}, "min_p"),
    ],
)
def test_bad_settings_name_their_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        SamplingParams(**kwargs)
    assert error.value.field == field


def test_the_engines_draws_are_its_seeded_stream_in_order() -> None:
    """Read in blocks, the draws are the values of asking the seeded generator batch by batch:
    a seed gives the same run whatever the block size (batches here cross block ends, and one
    is larger than a block)."""
    sizes = [10, 1, 7, 300, 13, BLOCK, 1, 1, 4 * BLOCK + 3, 2]
    draws, reference = Draws(7), np.random.default_rng(7)
    for n in sizes:
        assert draws.take(n) == reference.random(n).tolist()
    assert draws.one() == reference.random()
