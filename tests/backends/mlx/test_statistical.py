"""Sampled output follows the distribution the rules promise: p_target at D = 0, pi at D > 0.

Fixed seeds make each test deterministic. Tolerance: every token the reference gives at least
2% must land within 4.5 standard errors, sqrt(p (1 - p) / N), of its probability; a negative
control shows the same check rejects the distribution the output must not follow.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specplay.backends.mlx import MlxBackend
from specplay.engine.accept import residual_distribution, rule_output_distribution, tv_distance
from specplay.engine.rules import RuleParams, mentored_distribution, mentored_theta
from specplay.engine.settings import SpecSettings
from tests.support.distributions import follows
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import PROSE_PROMPT

SAMPLES = 2500


def next_token_probs(model, prefixes: list[list[int]]) -> np.ndarray:
    """Temperature-1 distributions after each prefix (all the same length), in float64."""
    logits = model(mx.array(prefixes))[:, -1, :].astype(mx.float32)
    return np.array(mx.softmax(logits, axis=-1)).astype(np.float64)


def sample_tokens(backend: MlxBackend, position: int, k: int = 1, **settings) -> np.ndarray:
    counts = np.zeros(backend.vocab_size)
    for seed in range(SAMPLES):
        request = {"temperature": 1.0, "seed": seed, "max_tokens": position + 1, "k": k}
        tokens = done(run(backend, PROSE_PROMPT, **request, **settings))
        counts[tokens.token_ids[position]] += 1
    return counts


@pytest.fixture(scope="module")
def prompt_ids(backend: MlxBackend) -> list[int]:
    return backend.encode(PROSE_PROMPT, raw=True)


def test_lossless_output_follows_the_target_at_a_drafted_position_and_the_next(
    backend: MlxBackend, prompt_ids: list[int]
) -> None:
    target, drafter = backend.models["target"].model, backend.models["far"].model
    p_target = next_token_probs(target, [prompt_ids])[0]
    p_draft = next_token_probs(drafter, [prompt_ids])[0]
    assert tv_distance(p_target, p_draft) > 0.5  # the drafter is wrong often: corrections do real work

    first = sample_tokens(backend, 0, route="far")
    assert follows(first, p_target)
    assert not follows(first, p_draft)

    # The second token is the bonus after an accepted draft, or the next round's drafted position.
    after_each = next_token_probs(target, [[*prompt_ids, t] for t in range(backend.vocab_size)])
    second = sample_tokens(backend, 1, route="far")
    assert follows(second, p_target @ after_each)


def test_budgeted_output_follows_pi(backend: MlxBackend, prompt_ids: list[int]) -> None:
    p_target = next_token_probs(backend.models["target"].model, [prompt_ids])[0]
    p_draft = next_token_probs(backend.models["far"].model, [prompt_ids])[0]
    budget = 0.4
    theta = mentored_theta(float(tv_distance(p_target, p_draft)), budget)
    assert 0 < theta < 1
    pi = mentored_distribution(p_target, p_draft, theta)

    first = sample_tokens(backend, 0, route="far", tv_budget=budget)
    assert follows(first, pi)
    assert not follows(first, p_target)


RELAXED = [
    ("typical", {"rule": "typical", "rule_params": RuleParams(typical_epsilon=0.01)}),
    ("lenience", {"rule": "lenience", "rule_params": RuleParams(lenience=4.0)}),
    ("cascade", {"rule": "cascade", "rule_params": RuleParams(cascade_alpha=1.0)}),
]


@pytest.mark.parametrize("settings", [s for _, s in RELAXED], ids=[name for name, _ in RELAXED])
def test_relaxed_rules_output_follows_their_pi(backend: MlxBackend, prompt_ids: list[int], settings: dict) -> None:
    p_target = next_token_probs(backend.models["target"].model, [prompt_ids])[0]
    p_draft = next_token_probs(backend.models["far"].model, [prompt_ids])[0]
    rule = SpecSettings(**settings).acceptance_rule
    acceptance = rule.acceptance_rows(p_target[None], p_draft[None], np)[0]
    pi = rule_output_distribution(p_draft, acceptance, residual_distribution(p_target, p_draft, np), np)
    assert tv_distance(pi, p_target) > 0.1  # far enough from the target for the control below to bite

    first = sample_tokens(backend, 0, route="far", **settings)
    assert follows(first, pi)
    assert not follows(first, p_target)


def test_sampled_trees_output_follows_the_target(backend: MlxBackend, prompt_ids: list[int]) -> None:
    """Width 3, two levels (six nodes): the first token is judged among the root's siblings, the
    second among a kept child's or in the next round; both follow the target exactly."""
    target, drafter = backend.models["target"].model, backend.models["far"].model
    p_target = next_token_probs(target, [prompt_ids])[0]
    p_draft = next_token_probs(drafter, [prompt_ids])[0]
    tree = {"route": "far", "width": 3}
    first = sample_tokens(backend, 0, **tree, k=2)
    assert follows(first, p_target)
    assert not follows(first, p_draft)
    after_each = next_token_probs(target, [[*prompt_ids, t] for t in range(backend.vocab_size)])
    second = sample_tokens(backend, 1, **tree, k=2)
    assert follows(second, p_target @ after_each)


def test_siblings_keep_more_at_the_root_than_one_child(backend: MlxBackend, prompt_ids: list[int]) -> None:
    """A chain keeps its first token with probability sum min(p_target, p_draft); three siblings
    judged in turn keep one more often (each rejection leaves the next a residual to match)."""
    p_target = next_token_probs(backend.models["target"].model, [prompt_ids])[0]
    p_draft = next_token_probs(backend.models["far"].model, [prompt_ids])[0]
    chain = float(np.minimum(p_target, p_draft).sum())
    kept = [
        rounds(run(backend, PROSE_PROMPT, temperature=1.0, seed=seed, max_tokens=2, k=1, route="far", width=3))[
            0
        ].num_accepted
        for seed in range(SAMPLES)
    ]
    error = np.sqrt(chain * (1 - chain) / SAMPLES)
    assert np.mean(kept) > chain + 4.5 * error, (np.mean(kept), chain)
