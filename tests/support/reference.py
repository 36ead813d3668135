"""The engine held to the plain-numpy reference round (engine/reference_round.py) on one request."""

from __future__ import annotations

from collections.abc import Callable

from specplay.engine.backend_protocol import Backend
from specplay.engine.reference_round import (
    Probs,
    lossless,
    reference_speculative,
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
    width: int = 1,
    nodes: int = 0,
    temperature: float = 0.0,
    seed: int = 0,
    rule: AcceptanceRule | None = None,
    max_tokens: int = 40,
    eos_ids: frozenset[int] = frozenset(),
) -> tuple[int, ...]:
    """Engine and reference on one request, drafting chains (width 1) or trees; asserts they
    commit the same ids and returns them."""
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
        ignore_eos=not eos_ids,
        **rule_settings(rule),
    )
    # Greedy, a tree's drafter orders and weighs its children by its softmax; a chain's takes its argmax.
    belief = probs(route, temperature or 1.0) if width > 1 else probs(route, temperature)
    expected = reference_speculative(
        probs("target", temperature),
        belief,
        backend.encode(prompt, raw=True),
        k=k,
        width=width,
        nodes=nodes,
        max_tokens=max_tokens,
        seed=seed,
        greedy=temperature == 0,
        eos_ids=eos_ids,
        accept=lossless if rule is None else rule_acceptance(rule),
    )
    engine = done(events).token_ids
    assert list(engine) == expected, (prompt[:10], route, k, width, nodes, temperature, seed, rule)
    assert every(r.depth <= k for r in rounds(events))
    return engine
