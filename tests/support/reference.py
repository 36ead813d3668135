"""The engine held to the plain-numpy reference round (engine/reference_round.py) on one request."""

from __future__ import annotations

from collections.abc import Callable

from specplay.engine.backend_protocol import Backend
from specplay.engine.reference_round import (
    Probs,
    lossless,
    reference_speculative,
    reference_tree_speculative,
    rule_acceptance,
)
from specplay.engine.rules import AcceptanceRule, RuleParams
from tests.support.checks import every
from tests.support.engine_runs import done, rounds, run

ModelProbs = Callable[[str, float], Probs]
"""A model's next-token distribution after a whole sequence, by model name ("target" too) and temperature."""


def rule_settings(rule: AcceptanceRule | None) -> dict[str, object]:
    """The run settings that select `rule` with its knobs (none: lossless, the default)."""
    return {} if rule is None else {"rule": rule.name, "rule_params": rule.into_params(RuleParams())}


def compare(
    backend: Backend,
    probs: ModelProbs,
    prompt: str,
    route: str,
    *,
    k: int,
    temperature: float = 0.0,
    seed: int = 0,
    rule: AcceptanceRule | None = None,
    max_tokens: int = 40,
    eos_ids: frozenset[int] = frozenset(),
) -> tuple[int, ...]:
    """Engine and reference on one request; asserts they commit the same ids and returns them."""
    events = run(
        backend,
        prompt,
        route=route,
        k=k,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        ignore_eos=not eos_ids,
        **rule_settings(rule),
    )
    expected = reference_speculative(
        probs("target", temperature),
        probs(route, temperature),
        backend.encode(prompt, raw=True),
        k=k,
        max_tokens=max_tokens,
        seed=seed,
        eos_ids=eos_ids,
        accept=lossless if rule is None else rule_acceptance(rule),
    )
    engine = done(events).token_ids
    assert list(engine) == expected, (prompt[:10], route, k, temperature, seed, rule)
    assert every(r.k <= k for r in rounds(events))
    return engine


def compare_tree(
    backend: Backend,
    probs: ModelProbs,
    prompt: str,
    route: str,
    *,
    width: int,
    nodes: int = 0,
    k: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    max_tokens: int = 40,
) -> tuple[int, ...]:
    """Engine and reference drafting trees on one request; asserts they commit the same ids."""
    events = run(
        backend,
        prompt,
        route=route,
        k=k,
        width=width,
        tree_nodes=nodes,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
    )
    expected = reference_tree_speculative(
        probs("target", temperature),
        probs(route, temperature or 1.0),  # at temperature 0 the drafter's softmax orders and weighs children
        backend.encode(prompt, raw=True),
        width=width,
        nodes=nodes,
        k=k,
        max_tokens=max_tokens,
        seed=seed,
        greedy=temperature == 0,
    )
    engine = done(events).token_ids
    assert list(engine) == expected, (prompt[:10], route, width, nodes, temperature, seed)
    return engine
