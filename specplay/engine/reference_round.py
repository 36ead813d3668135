"""The engine's speculative round in plain numpy: the oracle the tests hold the engine to.

Speculative sampling (Leviathan et al. 2023), one round of k drafted tokens:
  1. draft x_i ~ p_draft(. | context, x_<i) for i < k;
  2. keep x_i iff u_i < a(x_i), left to right (lossless: a(x) = min(1, p_target(x) / p_draft(x)));
  3. at the first rejection draw the correction from norm(max(p_target - p_draft, 0)), else,
     with all k kept, a bonus token from p_target after them.
Every draw is the engine's: a round of k takes its 3k + 1 uniforms from `Draws(seed)` as
`RoundDraws`, each token drawn by inverse CDF. At
temperature 0 the distributions are one-hot, which makes every draw the argmax. No caches, no
backend, no events: each model's distribution is recomputed from the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from specplay.engine.accept import inverse_cdf_sample, lossless_accept_probability, residual_distribution, tv_distance
from specplay.engine.draws import Draws, RoundDraws

if TYPE_CHECKING:
    from specplay.engine.rules import AcceptanceRule

Probs = Callable[[Sequence[int]], np.ndarray]
"""A model's next-token distribution [vocab] after a whole token sequence, sampling settings applied."""
Accept = Callable[[np.ndarray, np.ndarray, int], float]
"""a(x) at one position from (p_target, p_draft, x)."""


def lossless(p_target: np.ndarray, p_draft: np.ndarray, x: int) -> float:
    return lossless_accept_probability(float(p_target[x]), float(p_draft[x]))


def rule_acceptance(rule: AcceptanceRule) -> Accept:
    """Any rule of rules.py as the engine's judge asks it: a(x) from p_target(x), p_draft(x), d
    and the statistics the rule names, taken from the two rows."""

    def accept(p_target: np.ndarray, p_draft: np.ndarray, x: int) -> float:
        stats = {"tv": float(tv_distance(p_target, p_draft))}
        stats |= {name: float(v.item()) for name, v in rule.statistics(p_target[None], p_draft[None], np).items()}
        return rule.accept_probability(float(p_target[x]), float(p_draft[x]), stats)

    return accept


def _sample(probs: np.ndarray, uniform: float) -> int:
    return int(inverse_cdf_sample(probs[None], np.array([uniform]), np)[0])


def _row(probs: Probs, ids: Sequence[int]) -> np.ndarray:
    return np.asarray(probs(ids), dtype=np.float64)


def reference_speculative(
    target_probs: Probs,
    draft_probs: Probs,
    prompt_ids: Sequence[int],
    *,
    k: int,
    max_tokens: int,
    seed: int,
    eos_ids: frozenset[int] = frozenset(),
    accept: Accept = lossless,
) -> list[int]:
    """The token ids the engine commits with a fixed k: up to max_tokens, an EOS ending the run unoutput."""
    stream, out = Draws(seed), []
    while True:
        remaining = max_tokens - len(out)
        draws = RoundDraws.take(stream, min(k, remaining))  # the engine never drafts past the token limit
        context = [*prompt_ids, *out]
        drafted: list[int] = []
        rows: list[np.ndarray] = []
        for u in draws.draft:  # 1. draft
            rows.append(_row(draft_probs, [*context, *drafted]))
            drafted.append(_sample(rows[-1], u))
        committed: list[int] = []
        for i, x in enumerate(drafted):  # 2 and 3: the target's row at each position, judged left to right
            p_target, p_draft = _row(target_probs, [*context, *drafted[:i]]), rows[i]
            if draws.accept[i] >= accept(p_target, p_draft, x):  # rejected: the correction instead
                committed.append(_sample(residual_distribution(p_target, p_draft, np), draws.residual[i]))
                break
            committed.append(x)
            if x in eos_ids or len(committed) == remaining:
                break
        else:  # all kept: the bonus
            committed.append(_sample(_row(target_probs, [*context, *drafted]), draws.bonus))
        for token in committed:
            if token in eos_ids:
                return out
            out.append(token)
            if len(out) == max_tokens:
                return out
