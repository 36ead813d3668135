"""The engine's committed tokens against the plain-numpy reference round (engine/reference_round.py)
on the scripted backend, whose models are functions of the whole sequence: greedy and sampled,
every rule, several seeds, the token limit and EOS. The MLX backend is held to the same reference
in tests/backends/mlx/test_reference_round.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from specplay.engine.reference_round import Probs
from specplay.engine.rules import AcceptanceRule, Cascade, Lenience, Mentored, Typical
from specplay.engine.sampling import sampling_probs
from specplay.engine.settings import SamplingParams
from tests.support.engine_runs import rounds, run
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.reference import ModelProbs, rule_settings
from tests.support.reference import compare as reference_compare
from tests.support.scripted import EOS, ScriptedBackend, ScriptedModel, seeded

PROMPTS = {"code": CODE_PROMPT, "prose": PROSE_PROMPT}


def model_probs(backend: ScriptedBackend) -> ModelProbs:
    def probs(name: str, temperature: float) -> Probs:
        logits, sampling = backend.models[name].logits, SamplingParams(temperature)
        return lambda ids: sampling_probs(logits(ids)[None], sampling, np)[0]

    return probs


def compare(backend: ScriptedBackend, prompt: str, route: str, **request: Any) -> tuple[int, ...]:
    return reference_compare(backend, model_probs(backend), prompt, route, **request)


@pytest.mark.parametrize("route", ["near", "far", "self"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_engine_equals_the_reference(scripted: ScriptedBackend, prompt: str, route: str) -> None:
    for k in (1, 4, 7):
        compare(scripted, PROMPTS[prompt], route, k=k)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
@pytest.mark.parametrize("route", ["near", "far"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_sampled_engine_equals_the_reference(
    scripted: ScriptedBackend, prompt: str, route: str, temperature: float
) -> None:
    for seed in range(6):
        compare(scripted, PROMPTS[prompt], route, k=4, temperature=temperature, seed=seed)


@pytest.mark.parametrize(
    "rule",
    [Mentored(tv_budget=0.3), Typical(typical_epsilon=0.3), Lenience(lenience=3.0), Cascade(cascade_alpha=0.1)],
    ids=lambda rule: rule.name,
)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_rule_equals_the_reference(scripted: ScriptedBackend, rule: AcceptanceRule, temperature: float) -> None:
    relaxed = 0
    for seed in range(4):
        compare(scripted, PROSE_PROMPT, "near", k=4, temperature=temperature, seed=seed, rule=rule)
        common = {"route": "near", "k": 4, "temperature": temperature, "seed": seed}
        events = run(scripted, PROSE_PROMPT, **common, **rule_settings(rule))
        relaxed += sum(p.outcome == "relaxed" for r in rounds(events) for p in r.positions)
    if temperature > 0 or rule.name == "mentored":  # greedy, only a TV budget relaxes an argmax mismatch
        assert relaxed  # the rule did move the output, so the reference followed it


def test_token_limit_and_eos_end_the_run_as_in_the_engine(scripted: ScriptedBackend) -> None:
    # k cut to the tokens still needed (rounds of 4, then 2)
    assert len(compare(scripted, CODE_PROMPT, "self", k=4, max_tokens=7)) == 7
    target = seeded(0, eos_logit=2.0)
    ending = ScriptedBackend(
        ScriptedModel("target", target),
        [
            ScriptedModel("self", target),
            *(ScriptedModel(name, model.logits) for name, model in scripted.models.items() if name in ("near", "far")),
        ],
    )
    for route, temperature in (("near", 0.0), ("self", 0.0), ("near", 1.0), ("far", 1.0)):
        ids = compare(
            ending, CODE_PROMPT, route, k=4, temperature=temperature, eos_ids=frozenset({EOS}), max_tokens=300
        )
        assert EOS not in ids and len(ids) < 300


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("route", ["near", "far"])
def test_trees_equal_the_reference(scripted: ScriptedBackend, route: str, width: int, temperature: float) -> None:
    for prompt in PROMPTS.values():
        for seed in range(4 if temperature else 1):
            for k, nodes in ((3, 0), (5, 7)):
                reference_compare(
                    scripted,
                    model_probs(scripted),
                    prompt,
                    route,
                    width=width,
                    nodes=nodes,
                    k=k,
                    temperature=temperature,
                    seed=seed,
                )
