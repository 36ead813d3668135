"""Distributions for the tests: random pairs of them, a server's top-K row of one, and whether
sampled counts follow one."""

from __future__ import annotations

import numpy as np

from specplay.backends.vllm.topk import TopK, from_logprobs
from specplay.engine.rules import Cascade, Lenience, Mentored, Typical


def random_pairs(n: int, vocab: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        concentration = [0.1, 0.5, 2.0][i % 3]  # from peaked to flat
        p_target = rng.dirichlet(np.full(vocab, concentration))
        p_draft = rng.dirichlet(np.full(vocab, concentration))
        if i % 5 == 0:
            p_draft[rng.choice(vocab, vocab // 3, replace=False)] = 0.0  # tokens the drafter never proposes
            p_draft /= p_draft.sum()
        pairs.append((p_target, p_draft))
    return pairs


def follows(counts: np.ndarray, expected: np.ndarray) -> bool:
    """Each frequent token's share of the draws within 4.5 standard errors of `expected`: a
    fixed-seed check whose tolerance the binomial error states."""
    n = counts.sum()
    frequent = expected >= 0.02
    error = np.abs(counts / n - expected)[frequent]
    return bool(np.all(error <= 4.5 * np.sqrt(expected * (1 - expected) / n)[frequent]))


def truncated(dist: np.ndarray, k: int, extra: int | None = None) -> TopK:
    """As a server lists a row: the top-k, and the sampled (or actual) token wherever it lies."""
    listed = [int(i) for i in np.argsort(-dist, kind="stable")[:k]]
    listed += [extra] if extra is not None and extra not in listed else []
    with np.errstate(divide="ignore"):
        return from_logprobs({i: float(np.log(dist[i])) for i in listed}, top=k)


RELAXED = [
    Typical(typical_epsilon=0.3),
    Typical(typical_epsilon=0.05, typical_delta=0.5),
    Lenience(lenience=1.5),
    Lenience(lenience=4.0),
    Cascade(cascade_alpha=0.0),
    Cascade(cascade_alpha=0.2),
    Mentored(tv_budget=0.3),
]
"""Every relaxed rule at settings where it does relax, for tests over all of them."""
