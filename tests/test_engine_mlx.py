"""The engine over the real MLX backend, on tiny models built by the tests."""

from __future__ import annotations

import random
from dataclasses import replace

import mlx.core as mx
import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.backends.mlx.generation import _verify_argmax, _verify_distributions
from specplay.engine.controls import LiveControls
from specplay.engine.draws import RoundDraws
from specplay.engine.events import ControlEvent, Event, RoundEvent, StartEvent, StepEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.rules import MENTORED
from specplay.engine.settings import POLICIES, SamplingParams
from specplay.engine.speedup import round_account
from tests.conftest import CODE_PROMPT, PROSE_PROMPT, TinyModels
from tests.helpers import Observed, done, rounds, run, sources


@pytest.fixture(scope="module")
def greedy_reference(backend: MlxBackend) -> tuple[int, ...]:
    return done(run(backend, CODE_PROMPT, mode="target")).token_ids


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("route", ["near", "far"])
def test_greedy_speculative_equals_greedy_target_only(
    backend: MlxBackend, greedy_reference: tuple[int, ...], policy: str, route: str
) -> None:
    for k in (1, 2, 4, 7):
        events = run(backend, CODE_PROMPT, k=k, policy=policy, route=route)
        assert done(events).token_ids == greedy_reference, (k, policy, route)
    assert {"corrected"} <= set(sources(events))


def test_greedy_output_survives_random_live_changes(backend: MlxBackend) -> None:
    rng = random.Random(0)

    def change(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent) and rng.random() < 0.7:
            controls.update(k=rng.randint(1, 8), policy=rng.choice(POLICIES), route=rng.choice(["near", "far", "self"]))

    events = run(backend, CODE_PROMPT, max_tokens=60, on_event=change)
    assert done(events).token_ids == done(run(backend, CODE_PROMPT, mode="target", max_tokens=60)).token_ids
    # Each change is recorded at the token where it took effect, and the next round uses it.
    current = {"k": 4, "policy": "fixed", "route": "auto"}
    generated, changed, changes = 0, set(), 0
    for event in events:
        if isinstance(event, ControlEvent):
            assert event.token_index == generated
            current.update({name: value for name, _, value in event.changes})
            changed, changes = {name for name, _, _ in event.changes}, changes + 1
        elif isinstance(event, RoundEvent):
            if changed & {"k", "policy"}:  # a new k or policy restarts the policy from k
                expected_k = min(current["k"], 60 - generated)
                assert event.k == expected_k or (current["policy"] == "confidence" and event.k < expected_k)
            if changed and current["route"] != "auto":
                assert event.route == current["route"]
            changed = set()
            generated += len(event.tokens)
    assert changes >= 5


def test_fixed_k_change_applies_to_the_next_round(backend: MlxBackend) -> None:
    def shrink(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent) and event.index == 2:
            controls.update(k=2, route="far")

    events = run(backend, CODE_PROMPT, k=5, route="near", on_event=shrink)
    ks = [(r.k, r.route) for r in rounds(events)]
    assert ks[:3] == [(5, "near")] * 3
    assert all(k <= 2 and route == "far" for k, route in ks[3:])
    change = next(e for e in events if isinstance(e, ControlEvent))
    assert change.token_index == sum(len(r.tokens) for r in rounds(events)[:3])
    assert ("k", 5, 2) in change.changes and ("route", "near", "far") in change.changes


def test_a_drafter_identical_to_the_target_has_every_draft_accepted(backend: MlxBackend) -> None:
    events = run(backend, CODE_PROMPT, k=4, route="self", max_tokens=40)
    metrics = done(events).metrics
    assert metrics["draft_acceptance_rate"] == 1.0
    assert set(sources(events)) == {"accepted", "bonus"}
    assert [r.num_accepted for r in rounds(events)] == [4] * 8


def test_caches_hold_the_committed_tokens_after_every_round(backend: MlxBackend) -> None:
    observed = Observed(backend)

    def check(event: Event, controls: LiveControls) -> None:
        if not isinstance(event, RoundEvent):
            return
        generation = observed.generations[-1]
        lengths = generation.cache_lengths()
        committed = len(generation.tokens)
        assert lengths["target"] == committed - 1
        # The round's drafter lags by one only after a bonus token: it never saw d_k.
        assert lengths[event.route] == committed - 1 - (event.tokens[-1].source == "bonus")
        assert all(length <= committed - 1 for length in lengths.values())
        controls.update(route=["near", "far", "self"][event.index % 3], k=1 + event.index % 5)

    run(observed, CODE_PROMPT, k=3, route="near", max_tokens=50, on_event=check)


def test_sliding_window_target(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.swa_target), [("near", str(tiny.swa_near))])
    reference = done(run(backend, PROSE_PROMPT, mode="target", max_tokens=48)).token_ids
    for k in (2, 5):
        assert done(run(backend, PROSE_PROMPT, k=k, max_tokens=48)).token_ids == reference


def test_eos_ends_the_run_and_is_not_output(backend: MlxBackend, greedy_reference: tuple[int, ...]) -> None:
    eos = greedy_reference[9]
    cut = greedy_reference.index(eos)
    observed = Observed(backend, eos_token_ids=frozenset({eos}))
    for mode, route in [("target", "near"), ("speculative", "near"), ("speculative", "self")]:
        result = done(run(observed, CODE_PROMPT, mode=mode, route=route, ignore_eos=False))
        assert result.token_ids == greedy_reference[:cut]
        assert result.finish_reason == "stop"


def test_rounds_draft_no_more_than_the_tokens_still_needed(backend: MlxBackend) -> None:
    events = run(backend, CODE_PROMPT, k=4, route="self", max_tokens=7)
    assert [r.k for r in rounds(events)] == [4, 2]
    assert [t.source for t in rounds(events)[1].tokens] == ["accepted", "accepted"]
    assert done(events).finish_reason == "length" and len(done(events).token_ids) == 7


def test_the_same_seed_gives_the_same_output(backend: MlxBackend) -> None:
    a = done(run(backend, PROSE_PROMPT, temperature=1.0, tv_budget=0.3, seed=5, route="near"))
    b = done(run(backend, PROSE_PROMPT, temperature=1.0, tv_budget=0.3, seed=5, route="near"))
    c = done(run(backend, PROSE_PROMPT, temperature=1.0, tv_budget=0.3, seed=6, route="near"))
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.token_ids != c.token_ids


def test_target_and_draft_modes(backend: MlxBackend, greedy_reference: tuple[int, ...]) -> None:
    target = run(backend, CODE_PROMPT, mode="target")
    start = target[0]
    assert isinstance(start, StartEvent) and start.route is None
    assert set(sources(target)) == {"target"}
    metrics = done(target).metrics
    assert metrics["num_spec_steps"] is None and metrics["mean_acceptance_length"] is None
    assert metrics["tokens_per_s"] > 0
    # The target served as a drafter generates exactly the target's greedy output.
    draft = run(backend, CODE_PROMPT, mode="draft", route="self")
    assert done(draft).token_ids == greedy_reference
    assert set(sources(draft)) == {"draft"}


def test_full_budget_accepts_every_draft_token(backend: MlxBackend) -> None:
    for temperature in (0.0, 1.0):
        events = run(backend, CODE_PROMPT, route="far", tv_budget=1.0, temperature=temperature)
        assert set(sources(events)) <= {"accepted", "relaxed", "bonus"}
        assert all(r.num_accepted == r.k for r in rounds(events))
        assert "relaxed" in sources(events)


def test_greedy_with_a_budget_accepts_a_mismatch_with_probability_d(backend: MlxBackend) -> None:
    judged = []
    for seed in range(12):
        for r in rounds(run(backend, PROSE_PROMPT, route="far", tv_budget=0.5, seed=seed, max_tokens=60)):
            judged += [p.outcome for p in r.positions if p.p_target == 0.0 and p.outcome != "unreached"]
    accepted = judged.count("relaxed") / len(judged)
    # Binomial(n >= 300, 0.5): 0.5 +- 0.1 is more than three standard deviations.
    assert len(judged) >= 300 and abs(accepted - 0.5) < 0.1


def test_round_events_explain_each_decision(backend: MlxBackend) -> None:
    for r in rounds(run(backend, PROSE_PROMPT, route="near", temperature=1.0, tv_budget=0.2, k=6)):
        assert len(r.positions) == r.k == len(r.drafted)
        outcomes = [p.outcome for p in r.positions]
        if "rejected" in outcomes:
            first = outcomes.index("rejected")
            assert set(outcomes[first + 1 :]) <= {"unreached"}
            assert r.tokens[first].source == "corrected" and len(r.tokens) == first + 1
        for p in r.positions:
            assert 0 <= p.uniform < 1 and 0 <= p.tv_distance <= 1 + 1e-6
            assert p.theta == pytest.approx(1.0 if p.tv_distance == 0 else min(1.0, 0.2 / p.tv_distance))
        assert r.draft_ms > 0 and r.verify_ms > 0 and r.overhead_ms >= 0


def test_confidence_policy_stops_drafts_early(backend: MlxBackend, greedy_reference: tuple[int, ...]) -> None:
    events = run(backend, CODE_PROMPT, route="far", k=6, policy="confidence")
    assert done(events).token_ids == greedy_reference
    assert min(r.k for r in rounds(events)) < 6


def test_chat_template_is_applied_unless_raw(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.chat_target))
    chat = backend.encode("hello", raw=False)
    assert backend.tokenizer.decode(chat) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert backend.encode("hello", raw=True) == backend.tokenizer.encode("hello")


def test_auto_route_uses_the_route_map(backend: MlxBackend) -> None:
    engine = SpecEngine(backend, route_map={"code": "far"})  # prose keeps its default, the first drafter
    assert engine.route_choice(CODE_PROMPT).drafter == "far" and engine.route_choice(PROSE_PROMPT).drafter == "near"
    # auto never falls back silently: the choice says which class it saw and how it got there
    code, prose = engine.route_choice(CODE_PROMPT), engine.route_choice(PROSE_PROMPT)
    assert code.describe() == "auto: code prompt → far (the route map)"
    assert prose.describe() == (
        "auto: prose prompt → near (the first drafter: none is named prose, and no --route-map prose=NAME)"
    )
    # a map that names the first drafter is still the map (SmolLM2's: code to lookup, its first)
    named_first = SpecEngine(backend, route_map={"code": "near"}).route_choice(CODE_PROMPT)
    assert named_first.describe() == "auto: code prompt → near (the route map)"
    start = run(backend, CODE_PROMPT, max_tokens=2)[0]
    assert isinstance(start, StartEvent) and start.auto_route == start.route == "near"


def test_a_drafter_with_padded_vocabulary_pairs_with_the_target(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.target), [("padded", str(tiny.padded))])
    reference = done(run(backend, CODE_PROMPT, mode="target")).token_ids
    assert done(run(backend, CODE_PROMPT, k=3)).token_ids == reference
    sampled = done(run(backend, CODE_PROMPT, k=3, temperature=1.0))
    assert max(sampled.token_ids) < backend.vocab_size


def test_greedy_lossless_verification_from_the_argmax_alone_matches_the_full_computation(
    backend: MlxBackend,
) -> None:
    # Greedy lossless verification reads only the target's argmax, a drill-down's top lists
    # included; the full computation from the one-hot rows must hand the engine the same numbers.
    greedy = SamplingParams(0.0)
    draws = RoundDraws(draft=[0.5] * 5, accept=[0.5] * 5, residual=[0.3] * 5, bonus=0.7)
    generation = backend.open_generation(backend.encode(CODE_PROMPT, raw=True), prefill=(None, "far"))
    committed = len(generation.tokens) - 1
    for drafter in ("near", "far", "self"):
        draft = generation.draft(drafter, 5, greedy, [0.5] * 5, None)
        inputs = mx.concatenate([mx.array(generation.tokens[committed:]), draft.tokens.astype(mx.int32)])
        logits = generation.target.forward(inputs)[-6:]
        generation.target.trim_to(committed)
        for top_n in (0, 5):
            fast = _verify_argmax(draft.tokens, logits, top_n)
            full = _verify_distributions(draft, logits, sampling=greedy, rule=MENTORED, draws=draws, top_n=top_n)
            if top_n:  # a one-hot's other entries are filler (the engine drops them)
                assert full.top_target is not None and full.top_draft is not None
                full = replace(
                    full,
                    top_target=[[c for c in row if c[1] > 0] for row in full.top_target],
                    top_draft=[[c for c in row if c[1] > 0] for row in full.top_draft],
                )
                assert len(fast.top_target or ()) == 6 and len(fast.top_draft or ()) == 5
            assert full == replace(fast, corrections=list(fast.corrections))
        assert generation.verify(draft, greedy, MENTORED, draws, top_n=5) == fast
        generation.target.trim_to(committed)
        generation.drafters[drafter].trim_to(committed)


def test_a_target_only_lane_reports_its_mean_step_the_yardstick_of_predictions(backend: MlxBackend) -> None:
    from specplay.engine.events import StepEvent

    events = run(backend, CODE_PROMPT, mode="target", max_tokens=12)
    steps = [e.step_ms for e in events if isinstance(e, StepEvent)]
    # the steps tokens/s counts: after the first token's
    assert len(steps) == 12 and done(events).metrics["mean_step_ms"] == pytest.approx(sum(steps[1:]) / 11)
    assert done(run(backend, CODE_PROMPT, k=2, max_tokens=8)).metrics["mean_step_ms"] is None


@pytest.mark.parametrize("mode", ["speculative", "target"])
def test_round_times_add_up_to_the_lane_time_its_speed_counts(backend: MlxBackend, mode: str) -> None:
    """A round's draft + verify + host (a step's step_ms) runs from the end of the one before, so
    the rounds after the first account for exactly the time tokens/s divides by: a cost line in
    target steps takes the whole round apart, consumer's time between rounds included."""

    def slow_consumer(event: Event, controls: LiveControls) -> None:
        sum(range(20_000))  # a consumer's work between rounds is the lane's time too

    events = run(backend, CODE_PROMPT, mode=mode, route="near", max_tokens=30, on_event=slow_consumer)
    metrics = done(events).metrics
    if mode == "speculative":
        times = [e.draft_ms + e.verify_ms + e.overhead_ms for e in rounds(events)]
    else:
        times = [e.step_ms for e in events if isinstance(e, StepEvent)]
    assert (metrics["num_tokens"] - 1) / metrics["tokens_per_s"] == pytest.approx(sum(times[1:]) / 1000, rel=1e-9)
    if mode == "speculative":  # so the rounds' account, against any target step, is tokens/s against its speed
        account = round_account(metrics, 40.0)
        assert account is not None and account.speedup == pytest.approx(metrics["tokens_per_s"] / (1000 / 40.0))
    else:
        assert metrics["mean_step_ms"] == pytest.approx(1000 / metrics["tokens_per_s"])
    # ...and the first round's time, the prefill's apart, is in the time to the first token
    assert metrics["time_to_first_token_ms"] > times[0]
