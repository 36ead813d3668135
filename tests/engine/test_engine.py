"""The engine's rounds, policies, routes and live controls, on the scripted scripted (no model library)."""

from __future__ import annotations

import random

import pytest

from specplay.engine.events import ControlEvent, Event, RoundEvent, StartEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.routers.routing import routing_for
from specplay.engine.settings import POLICIES
from specplay.engine.speedup import round_account
from tests.support.checks import every
from tests.support.engine_runs import assert_caches_hold_the_committed, done, rounds, run, sources
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.scripted import EOS, ScriptedBackend, ScriptedModel, seeded

ROUTES = ("near", "far", "self", "lookup")


@pytest.fixture
def greedy_reference(scripted: ScriptedBackend) -> tuple[int, ...]:
    return done(run(scripted, CODE_PROMPT, mode="target")).token_ids


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("route", ROUTES)
def test_greedy_speculative_equals_greedy_target_only(
    scripted: ScriptedBackend, greedy_reference: tuple[int, ...], policy: str, route: str
) -> None:
    for k in (1, 2, 4, 7):
        events = run(scripted, CODE_PROMPT, k=k, policy=policy, route=route)
        assert done(events).token_ids == greedy_reference, (k, policy, route)
    if route != "self":
        assert "corrected" in sources(events)


def test_greedy_output_survives_random_live_changes(scripted: ScriptedBackend) -> None:
    rng = random.Random(0)

    def change(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent) and rng.random() < 0.7:
            controls.update(k=rng.randint(1, 8), policy=rng.choice(POLICIES), route=rng.choice(ROUTES))

    events = run(scripted, CODE_PROMPT, max_tokens=60, on_event=change)
    assert done(events).token_ids == done(run(scripted, CODE_PROMPT, mode="target", max_tokens=60)).token_ids
    # Each change is recorded at the token where it took effect, and the next round uses it.
    current = {"k": 4, "policy": "fixed", "route": "auto"}
    generated, changed, changes = 0, set(), 0
    for event in events:
        if isinstance(event, ControlEvent):
            assert event.token_index == generated
            current.update({name: value for name, _, value in event.changes})
            changed, changes = {name for name, _, _ in event.changes}, changes + 1
        elif isinstance(event, RoundEvent):
            # a new k or policy restarts the policy from k (prompt lookup may find fewer)
            if changed & {"k", "policy"} and current["route"] != "lookup":
                expected_k = min(current["k"], 60 - generated)
                assert event.nodes == expected_k or (current["policy"] == "confidence" and event.nodes < expected_k)
            if changed and current["route"] != "auto":
                assert event.drafter == current["route"]
            changed = set()
            generated += len(event.tokens)
    assert changes >= 5


def test_fixed_k_change_applies_to_the_next_round(scripted: ScriptedBackend) -> None:
    def shrink(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent) and event.index == 2:
            controls.update(k=2, route="far")

    events = run(scripted, CODE_PROMPT, k=5, route="near", on_event=shrink)
    ks = [(r.nodes, r.drafter) for r in rounds(events)]
    assert ks[:3] == [(5, "near")] * 3
    assert len(ks) > 3 and every(k <= 2 and route == "far" for k, route in ks[3:])
    change = next(e for e in events if isinstance(e, ControlEvent))
    assert change.token_index == sum(len(r.tokens) for r in rounds(events)[:3])
    assert ("k", 5, 2) in change.changes and ("route", "near", "far") in change.changes


def test_a_drafter_identical_to_the_target_has_every_draft_accepted(scripted: ScriptedBackend) -> None:
    for temperature in (0.0, 1.0):
        events = run(scripted, CODE_PROMPT, k=4, route="self", max_tokens=40, temperature=temperature)
        metrics = done(events).metrics
        assert metrics["draft_acceptance_rate"] == 1.0
        assert set(sources(events)) == {"accepted", "bonus"}
        assert [r.num_accepted for r in rounds(events)] == [4] * 8


def test_caches_hold_the_committed_tokens_after_every_round(scripted: ScriptedBackend) -> None:
    def check(event: Event, controls: LiveControls) -> None:
        if not isinstance(event, RoundEvent):
            return
        assert_caches_hold_the_committed(scripted.generations[-1], event)
        controls.update(route=["near", "far", "self"][event.index % 3], k=1 + event.index % 5)

    events = run(scripted, CODE_PROMPT, k=3, route="near", max_tokens=50, on_event=check)
    assert len(rounds(events)) > 5


def test_eos_ends_the_run_and_is_not_output() -> None:
    # A target that may end: EOS is the likeliest token after some contexts.
    target = seeded(0, eos_logit=2.0)
    ending = ScriptedBackend(ScriptedModel("target", target), [ScriptedModel("self", target)])
    reference = done(run(ending, PROSE_PROMPT, mode="target", max_tokens=400, ignore_eos=True)).token_ids
    assert EOS in reference
    cut = reference.index(EOS)
    for mode in ("target", "speculative"):
        result = done(run(ending, PROSE_PROMPT, mode=mode, route="self", ignore_eos=False, max_tokens=400))
        assert result.token_ids == reference[:cut] and result.finish_reason == "stop"
        sampled = done(run(ending, PROSE_PROMPT, mode=mode, temperature=1.0, ignore_eos=False, max_tokens=400))
        assert EOS not in sampled.token_ids and sampled.finish_reason == "stop"


def test_rounds_draft_no_more_than_the_tokens_still_needed(scripted: ScriptedBackend) -> None:
    events = run(scripted, CODE_PROMPT, k=4, route="self", max_tokens=7)
    assert [r.nodes for r in rounds(events)] == [4, 2]
    assert [t.source for t in rounds(events)[1].tokens] == ["accepted", "accepted"]
    assert done(events).finish_reason == "length" and len(done(events).token_ids) == 7


def test_the_same_seed_gives_the_same_output(scripted: ScriptedBackend) -> None:
    a = done(run(scripted, PROSE_PROMPT, temperature=1.0, tv_budget=0.3, seed=5, route="near"))
    b = done(run(scripted, PROSE_PROMPT, temperature=1.0, tv_budget=0.3, seed=5, route="near"))
    c = done(run(scripted, PROSE_PROMPT, temperature=1.0, tv_budget=0.3, seed=6, route="near"))
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.token_ids != c.token_ids


def test_target_and_draft_modes(scripted: ScriptedBackend, greedy_reference: tuple[int, ...]) -> None:
    target = run(scripted, CODE_PROMPT, mode="target")
    start = target[0]
    assert isinstance(start, StartEvent) and start.drafter is None
    assert set(sources(target)) == {"target"}
    metrics = done(target).metrics
    assert metrics["num_spec_steps"] is None and metrics["mean_acceptance_length"] is None
    assert metrics["tokens_per_s"] > 0
    # The target served as a drafter generates exactly the target's greedy output.
    draft = run(scripted, CODE_PROMPT, mode="draft", route="self")
    assert done(draft).token_ids == greedy_reference
    assert set(sources(draft)) == {"draft"}


def test_full_budget_accepts_every_draft_token(scripted: ScriptedBackend) -> None:
    for temperature in (0.0, 1.0):
        events = run(scripted, CODE_PROMPT, route="far", tv_budget=1.0, temperature=temperature)
        assert set(sources(events)) <= {"accepted", "relaxed", "bonus"}
        assert rounds(events) and every(r.num_accepted == r.nodes for r in rounds(events))
        assert "relaxed" in sources(events)


def test_greedy_with_a_budget_accepts_a_mismatch_with_probability_d(scripted: ScriptedBackend) -> None:
    judged = []
    for seed in range(12):
        for r in rounds(run(scripted, PROSE_PROMPT, route="far", tv_budget=0.5, seed=seed, max_tokens=60)):
            judged += [p.outcome for p in r.positions if p.p_target == 0.0 and p.outcome != "unreached"]
    accepted = judged.count("relaxed") / len(judged)
    # Binomial(n >= 300, 0.5): 0.5 +- 0.1 is more than three standard deviations.
    assert len(judged) >= 300 and abs(accepted - 0.5) < 0.1


def test_round_events_explain_each_decision(scripted: ScriptedBackend) -> None:
    judged = rounds(run(scripted, PROSE_PROMPT, route="near", temperature=1.0, tv_budget=0.2, k=6))
    assert any(p.outcome == "rejected" for r in judged for p in r.positions)
    for r in judged:
        assert len(r.positions) == r.nodes == len(r.drafted)
        outcomes = [p.outcome for p in r.positions]
        if "rejected" in outcomes:
            first = outcomes.index("rejected")
            assert set(outcomes[first + 1 :]) <= {"unreached"}
            assert r.tokens[first].source == "corrected" and len(r.tokens) == first + 1
        for p in r.positions:
            assert 0 <= p.uniform < 1 and 0 <= p.tv_distance <= 1 + 1e-6
            assert p.theta == pytest.approx(1.0 if p.tv_distance == 0 else min(1.0, 0.2 / p.tv_distance))
        assert r.draft_ms > 0 and r.verify_ms > 0 and r.overhead_ms >= 0


def test_confidence_policy_stops_drafts_early(scripted: ScriptedBackend, greedy_reference: tuple[int, ...]) -> None:
    events = run(scripted, CODE_PROMPT, route="far", k=6, policy="confidence")
    assert done(events).token_ids == greedy_reference
    assert min(r.nodes for r in rounds(events)) < 6


def test_auto_route_uses_the_route_map(scripted: ScriptedBackend) -> None:
    engine = SpecEngine(
        scripted, routing_for(scripted.drafters, route_map={"code": "far"})
    )  # prose keeps its default, the first drafter
    assert engine.routing.choice(CODE_PROMPT).drafter == "far" and engine.routing.choice(PROSE_PROMPT).drafter == "near"
    # auto never falls back silently: the choice says which class it saw and how it got there
    code, prose = engine.routing.choice(CODE_PROMPT), engine.routing.choice(PROSE_PROMPT)
    assert code.describe() == "auto: code prompt → far (the route map)"
    assert prose.describe() == (
        "auto: prose prompt → near (the first drafter: none is named prose, and no --route-map prose=NAME)"
    )
    # a map that names the first drafter is still the map (SmolLM2's: code to lookup, its first)
    named_first = SpecEngine(scripted, routing_for(scripted.drafters, route_map={"code": "near"})).routing.choice(
        CODE_PROMPT
    )
    assert named_first.describe() == "auto: code prompt → near (the route map)"
    start = run(scripted, CODE_PROMPT, max_tokens=2)[0]
    assert isinstance(start, StartEvent) and start.auto_route == start.drafter == "near"


def test_a_target_only_lane_reports_its_mean_step_the_yardstick_of_predictions(scripted: ScriptedBackend) -> None:
    events = run(scripted, CODE_PROMPT, mode="target", max_tokens=12)
    steps = [e.step_ms for e in events if isinstance(e, StepEvent)]
    # the steps tokens/s counts: after the first token's
    assert len(steps) == 12 and done(events).metrics["mean_step_ms"] == pytest.approx(sum(steps[1:]) / 11)
    assert done(run(scripted, CODE_PROMPT, k=2, max_tokens=8)).metrics["mean_step_ms"] is None


@pytest.mark.parametrize("mode", ["speculative", "target"])
def test_round_times_add_up_to_the_lane_time_its_speed_counts(scripted: ScriptedBackend, mode: str) -> None:
    """A round's draft + verify + host (a step's step_ms) runs from the end of the one before, so
    the rounds after the first account for exactly the time tokens/s divides by: a cost line in
    target steps takes the whole round apart, consumer's time between rounds included."""

    def slow_consumer(event: Event, controls: LiveControls) -> None:
        scripted.clock.advance(0.003)  # a consumer's work between rounds is the lane's time too

    events = run(scripted, CODE_PROMPT, mode=mode, route="near", max_tokens=30, on_event=slow_consumer)
    metrics = done(events).metrics
    if mode == "speculative":
        times = [e.draft_ms + e.verify_ms + e.overhead_ms for e in rounds(events)]
        # the consumer's 3 ms after each round fall in the next round's host time
        assert [e.overhead_ms for e in rounds(events)] == pytest.approx([3.0] * len(times))
        first_delivery = len(rounds(events)[0].tokens)
        assert first_delivery > 1  # the case the rate must not credit: tokens made before its span
    else:
        times = [e.step_ms for e in events if isinstance(e, StepEvent)]
        first_delivery = 1
    decoded = metrics["num_tokens"] - first_delivery
    assert decoded / metrics["tokens_per_s"] == pytest.approx(sum(times[1:]) / 1000, rel=1e-9)
    if mode == "speculative":  # so the rounds' account, against any target step, is tokens/s against its speed
        account = round_account(metrics, 40.0)
        assert account is not None and account.speedup == pytest.approx(metrics["tokens_per_s"] / (1000 / 40.0))
    else:
        assert metrics["mean_step_ms"] == pytest.approx(1000 / metrics["tokens_per_s"])
    # ...and the first round's time, the prefill's apart, is in the time to the first token
    assert metrics["time_to_first_token_ms"] > times[0]


def test_simulated_time_follows_the_work_alone(scripted: ScriptedBackend) -> None:
    """The scripted clock moves only as models compute (tests/support/scripted.py): a round's
    verify time is one target forward over the last committed token and k drafted ones, its
    draft time k drafter steps, the first over the tokens its cache lacks (two after a bonus,
    which the drafter never saw); no host time. Snapshots and speed tests rely on it."""
    judged = rounds(run(scripted, PROSE_PROMPT, route="near", k=3, max_tokens=30))
    assert {r.tokens[-1].source for r in judged} >= {"bonus", "corrected"}
    lagging = False
    for r in judged:
        pending = 2 if lagging else 1
        assert r.verify_ms == pytest.approx(10.0 + 1.0 * (1 + r.nodes))  # target: 10 ms a pass, 1 ms a row
        assert r.draft_ms == pytest.approx(2.0 * r.nodes + 0.2 * (pending + r.nodes - 1))  # drafter: a fifth of that
        assert r.overhead_ms == pytest.approx(0.0, abs=1e-9)
        lagging = r.tokens[-1].source == "bonus"


def test_each_round_records_the_k_it_asked_beside_the_k_it_drafted(scripted: ScriptedBackend) -> None:
    """A proposal shorter than asked (prompt lookup finding a short match, or none) is told apart
    from a policy that asked for less; the none route asks for nothing."""
    looked_up = rounds(run(scripted, CODE_PROMPT * 3, route="lookup", k=6, max_tokens=60))
    assert every(r.k_asked is not None and r.nodes <= r.k_asked <= 6 for r in looked_up)
    assert any(r.nodes < r.k_asked for r in looked_up if r.k_asked is not None)  # short proposals
    assert every(r.k_asked == min(6, 60 - r.token_index) for r in looked_up)  # fixed k, within the tokens left
    assert every(
        r.k_asked == 0 and r.nodes == 0 for r in rounds(run(scripted, PROSE_PROMPT, route="none", max_tokens=8))
    )
