"""Counterfactual routes and the relaxed rules through the engine, on the scripted backend."""

from __future__ import annotations

import itertools

import pytest

from specplay.engine.accept import lossless_accept_probability
from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.rules import RuleParams
from tests.support.checks import every
from tests.support.engine_runs import done, rounds, run, sources
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.scripted import ScriptedBackend

RULES = [
    {"rule": "mentored"},
    {"rule": "mentored", "tv_budget": 0.4},
    {"rule": "typical", "rule_params": RuleParams(typical_epsilon=0.3)},
    {"rule": "lenience", "rule_params": RuleParams(lenience=3.0)},
    {"rule": "cascade", "rule_params": RuleParams(cascade_alpha=0.1)},
]


def output(events: list[Event]) -> tuple[tuple[int, ...], list[str]]:
    return done(events).token_ids, sources(events)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("settings", RULES, ids=lambda s: f"{s['rule']}-{s.get('tv_budget', s.get('rule_params'))}")
def test_counterfactual_routes_never_change_the_committed_output(
    scripted: ScriptedBackend, settings: dict, temperature: float
) -> None:
    for seed in (0, 1):
        common = {"route": "far", "k": 3, "seed": seed, "temperature": temperature, "max_tokens": 30, **settings}
        off = run(scripted, PROSE_PROMPT, **common)
        on = run(scripted, PROSE_PROMPT, counterfactual=True, **common)
        assert output(on) == output(off), (settings, seed)
        assert [(r.drafted, r.positions) for r in rounds(on)] == [(r.drafted, r.positions) for r in rounds(off)]
        assert every({c.drafter for c in r.counterfactuals} == {"near", "self", "lookup"} for r in rounds(on))
        assert not any(r.counterfactuals for r in rounds(off))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_an_alternative_identical_to_the_target_accepts_every_position(
    scripted: ScriptedBackend, temperature: float
) -> None:
    events = run(scripted, PROSE_PROMPT, route="far", k=4, temperature=temperature, counterfactual=True, max_tokens=40)
    for event in rounds(events):
        same = next(c for c in event.counterfactuals if c.drafter == "self")
        assert same.num_accepted == len(same.drafted) == event.nodes
    metrics = done(events).metrics
    lengths = metrics["counterfactual"]["self"]["accepted_length_per_round"]
    assert lengths == [r.nodes for r in rounds(events)]
    routed = metrics["counterfactual"]["far"]
    assert routed["accepted_length_per_round"] == [r.num_accepted for r in rounds(events)]
    assert routed["mean_acceptance_length"] == pytest.approx(metrics["mean_acceptance_length"])
    # Route regret: the best drafter's mean acceptance length minus the routed one's.
    best = max(entry["mean_acceptance_length"] for entry in metrics["counterfactual"].values())
    assert metrics["route_regret"] == pytest.approx(best - metrics["mean_acceptance_length"])
    assert metrics["route_regret"] > 1


def test_caches_hold_the_committed_tokens_with_counterfactuals(scripted: ScriptedBackend) -> None:

    def check(event: Event, controls: LiveControls) -> None:
        if not isinstance(event, RoundEvent):
            return
        generation = scripted.generations[-1]
        committed = len(generation.tokens)
        assert generation.cache_lengths()["target"] == committed - 1
        assert every(length <= committed - 1 for length in generation.cache_lengths().values())
        controls.update(route=["near", "far", "self", "lookup"][event.index % 4], counterfactual=event.index % 4 != 3)

    events = run(scripted, CODE_PROMPT, k=3, route="near", temperature=1.0, max_tokens=50, on_event=check)
    metrics = done(events).metrics
    judged = [r.index for r in rounds(events) if r.counterfactuals]
    assert metrics["counterfactual_rounds"] == judged
    assert every(len(entry["accepted_length_per_round"]) == len(judged) for entry in metrics["counterfactual"].values())


def test_counterfactual_time_is_left_out_of_the_lanes_times(scripted: ScriptedBackend) -> None:
    """The other drafters' passes advance the scripted clock (tests/support/scripted.py) and are
    counted apart: the lane's own times and speed are those of the run without them."""

    def metrics(counterfactual: bool) -> dict:
        return done(run(scripted, CODE_PROMPT, route="far", counterfactual=counterfactual, temperature=1.0)).metrics

    on, off = metrics(True), metrics(False)
    assert on["counterfactual_ms"] > 0 and "counterfactual_ms" not in off
    for name in ("tokens_per_s", "time_to_first_token_ms", "draft_ms", "verify_ms", "overhead_ms"):
        assert on[name] == pytest.approx(off[name], rel=1e-12), name


@pytest.mark.parametrize(
    "settings",
    [
        {"rule": "lenience", "rule_params": RuleParams(lenience=1.0)},
        {"rule": "cascade", "rule_params": RuleParams(cascade_alpha=-1.0)},
        {"rule": "typical", "rule_params": RuleParams(typical_epsilon=1.5, typical_delta=1e6)},
    ],
    ids=["lenience-1", "cascade-minus-1", "typical-eps-above-1"],
)
def test_the_lossless_end_of_each_knob_gives_the_lossless_output(scripted: ScriptedBackend, settings: dict) -> None:
    for seed, temperature in itertools.product((0, 1, 2), (0.0, 1.0)):
        common = {"route": "far", "seed": seed, "temperature": temperature, "max_tokens": 30}
        lossless = run(scripted, PROSE_PROMPT, **common)
        relaxed = run(scripted, PROSE_PROMPT, **common, **settings)
        assert output(relaxed) == output(lossless), (seed, temperature)
        assert done(relaxed).metrics["tv_spent"] == pytest.approx(0.0, abs=1e-4)  # float32 sums over the vocabulary


@pytest.mark.parametrize("settings", RULES[1:], ids=lambda s: s["rule"])
def test_relaxed_rules_keep_more_and_say_so(scripted: ScriptedBackend, settings: dict) -> None:
    events = run(scripted, PROSE_PROMPT, route="near", temperature=1.0, max_tokens=60, **settings)
    relaxed = done(events).metrics
    assert "relaxed" in sources(events)
    assert relaxed["tv_spent"] > 0
    spent = sum(p.tv_spent for r in rounds(events) for p in r.positions)
    assert relaxed["tv_spent"] == pytest.approx(spent)
    for position in (p for r in rounds(events) for p in r.positions if p.outcome != "unreached"):
        assert 0 <= position.tv_spent <= position.tv_distance + 1e-6
        assert position.accept_probability is not None
        # Whatever lossless acceptance keeps under the same draw, the rule keeps too.
        assert position.accept_probability >= lossless_accept_probability(position.p_target, position.p_draft)
        assert (position.outcome == "relaxed") == (
            lossless_accept_probability(position.p_target, position.p_draft) <= position.uniform
            and position.outcome != "rejected"
        )
        assert (position.uniform < position.accept_probability) == (position.outcome != "rejected")
