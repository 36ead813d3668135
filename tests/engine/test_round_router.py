"""Per-round routing (`--route adaptive`): the round router alone, and through the engine on the
scripted backend, whose drafters' acceptance can change mid-run and whose clock charges each
forward pass exactly."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pytest

from specplay.config.capabilities import vllm_native
from specplay.engine.capabilities import check_supported
from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.routers.rounds import RoundObservation, RoundRouter, kept_of_proposal
from specplay.engine.settings import SpecSettings
from specplay.errors import ConfigError
from tests.support.engine_runs import done, rounds, run
from tests.support.scripted import TARGET_SEED, Cost, Logits, ScriptedBackend, ScriptedModel, seeded

PROMPT = "the keeper climbed the stairs"
CHANGE_AT = len(PROMPT) + 60
"""Context length at which the two switching drafters trade places."""
DRAFTER_COST = Cost(step_ms=2.0, row_ms=0.2)


def switching(before: Logits, after: Logits, at: int) -> Logits:
    """`before` on contexts shorter than `at` tokens, `after` from there on."""

    def logits(context: Sequence[int]) -> np.ndarray:
        return before(context) if len(context) < at else after(context)

    return logits


def backend_of(drafters: dict[str, Logits], lookup: bool = False) -> ScriptedBackend:
    target = seeded(TARGET_SEED)
    models = [ScriptedModel(name, logits, DRAFTER_COST) for name, logits in drafters.items()]
    return ScriptedBackend(ScriptedModel("target", target), models, lookups={"lookup": (1, 3)} if lookup else None)


def switching_backend() -> ScriptedBackend:
    """`early` is the target itself until CHANGE_AT, then a model of its own; `late` the reverse."""
    target, other = seeded(TARGET_SEED), seeded(1)
    return backend_of({"early": switching(target, other, CHANGE_AT), "late": switching(other, target, CHANGE_AT)})


def routes(events: list[Event]) -> list[str]:
    return [r.drafter for r in rounds(events)]


# --- the round router alone ---------------------------------------------------------------------


def test_each_drafter_is_tried_once_in_order_before_any_is_judged() -> None:
    router = RoundRouter(("b", "a", "c"))
    tried = []
    for _ in range(3):
        choice = router.choose(4, tried[-1] if tried else "b", {})
        tried.append(choice)
        router.observe(RoundObservation(choice, 1, 10.0))
    assert tried == ["b", "a", "c"]


def test_the_best_rate_wins_not_the_most_tokens() -> None:
    """Tokens per ms: 5 tokens in 20 ms (0.25) loses to 3 tokens in 10 ms (0.3)."""
    router = RoundRouter(("slow", "fast"))
    for _ in range(30):
        router.observe(RoundObservation("slow", 5, 20.0), [RoundObservation("fast", 3, 10.0)])
    assert router.full_information
    assert router.choose(4, "slow", {}) == "fast"
    assert router.rate("fast") == pytest.approx(0.3, rel=0.05)  # drawn a little toward the pooled 15 ms
    assert router.rate("slow") == pytest.approx(0.25, rel=0.05)


def test_a_drafter_that_lost_is_tried_again_once_its_record_ages() -> None:
    """Bandit feedback: only the routed drafter is observed. `b` lost its one try; as its
    observation's weight decays (0.95 a round) its bonus grows until it is tried again."""
    router = RoundRouter(("a", "b"))
    router.observe(RoundObservation("a", 4, 10.0))
    router.observe(RoundObservation("b", 2, 10.0))
    choices = []
    current = "b"
    for _ in range(60):
        current = router.choose(4, current, {})
        choices.append(current)
        router.observe(RoundObservation(current, 4 if current == "a" else 2, 10.0))
    assert choices[0] == "a"
    retries = [i for i, c in enumerate(choices) if c == "b"]
    assert retries, "b is never tried again"
    assert 5 <= retries[0] <= 40
    assert len(retries) <= 6  # a loser is revisited rarely: each try costs 2 tokens


def test_a_drop_in_the_routed_drafters_tokens_tries_the_others_again() -> None:
    """`a` served 5 tokens a round for 20 rounds, `b` 1 in its one try; then `a` falls to 1. Its
    discounted record alone would keep it routed for many rounds; after `window` (3) rounds the
    drop restarts its record and ages b's, and b is tried again."""

    def history(router: RoundRouter) -> RoundRouter:
        router.observe(RoundObservation("a", 5, 10.0))
        router.observe(RoundObservation("b", 1, 10.0))
        for _ in range(20):
            assert router.choose(4, "a", {}) == "a"
            router.observe(RoundObservation("a", 5, 10.0))
        for _ in range(3):
            router.observe(RoundObservation("a", 1, 10.0))
        return router

    watched = history(RoundRouter(("a", "b")))
    assert watched.changes == 1
    assert watched.choose(4, "a", {}) == "b"
    unwatched = history(RoundRouter(("a", "b"), window=1000))
    assert unwatched.changes == 0
    assert unwatched.choose(4, "a", {}) == "a"


def test_one_slow_first_round_does_not_price_a_drafter_out() -> None:
    """`b`'s first round took 1000 ms (a first use compiling its kernels), `a`'s 10 ms: clipped at
    three times the pooled mean and drawn toward the pool by one pseudo-round, b's 4 tokens a round
    still win. Were `a` a free drafter (a lookup: its round a verify pass), the pool would not
    draw its time up."""
    router = RoundRouter(("a", "b"))
    router.observe(RoundObservation("a", 1, 10.0))
    router.observe(RoundObservation("b", 4, 1000.0))
    pooled_ms = (0.95 * 10.0 + 30.0) / (0.95 + 1.0)  # b's 1000 ms clipped at 3 × a's 10
    assert router.round_ms("b") == pytest.approx((30.0 + pooled_ms) / 2)
    assert router.round_ms("a") == pytest.approx((10.0 + pooled_ms) / 2)
    assert router.choose(4, "a", {}) == "b"
    router.choose(4, "a", {}, proposing={"a": 4})  # `a` proposes for free: its own 10 ms, not drawn up
    assert router.round_ms("a") == pytest.approx(10.0)


def test_a_rise_in_a_free_drafters_judged_proposals_switches_to_it_at_once() -> None:
    """`lookup` served once (1 token, 10 ms) and then, judged for free, kept nothing for 20 rounds
    while `model` served 2 tokens a round in 10 ms (and `other` 1 token once). When the text turns
    to a copy, lookup's proposals keep all 4: after three such judgements its old record is aged
    and it serves. On its record alone it would not be chosen yet (about 1.9 tokens a round)."""

    def history(router: RoundRouter) -> RoundRouter:
        router.observe(RoundObservation("other", 1, 10.0))
        router.observe(RoundObservation("model", 2, 10.0))
        router.observe(RoundObservation("lookup", 1, 10.0))
        for _ in range(20):
            router.observe(RoundObservation("model", 2, 10.0), [RoundObservation("lookup", 1, None)])
        for _ in range(3):
            router.observe(RoundObservation("model", 2, 10.0), [RoundObservation("lookup", 5, None)])
        return router

    watched = history(RoundRouter(("model", "other", "lookup")))
    assert watched.changes == 1 and watched.choose(4, "model", {}) == "lookup"
    unwatched = history(RoundRouter(("model", "other", "lookup"), window=1000))
    assert unwatched.changes == 0 and unwatched.choose(4, "model", {}) != "lookup"


def test_a_free_drafter_with_nothing_to_propose_is_passed_over() -> None:
    """Lookup's rate is the best on record, but this round it found nothing to copy: a round with
    it would be a target step, so the model drafter serves; a round that drafted nothing is
    nobody's record."""
    router = RoundRouter(("model", "lookup"))
    for _ in range(10):
        router.observe(RoundObservation("model", 2, 20.0), [RoundObservation("lookup", 4, 10.0)])
    assert router.choose(4, "lookup", {}, {"lookup": 3}) == "lookup"
    assert router.choose(4, "lookup", {}, {"lookup": 0}) == "model"
    before = router.rate("lookup")
    router.observe(None)
    assert router.rate("lookup") == pytest.approx(before)


def test_a_switch_is_charged_its_catch_up() -> None:
    """`b` is 10% faster, but catching up on 200 tokens at 1 ms each, spread over 4 rounds,
    costs far more than that: no switch. With nothing to catch up on, it switches."""
    router = RoundRouter(("a", "b"))
    for _ in range(30):
        router.observe(RoundObservation("a", 4, 10.0), [RoundObservation("b", 4, 9.0)])
    router.observe_catch_up("b", 10, 10.0)
    assert router.catch_up_ms_per_token("b") == pytest.approx(1.0)
    assert router.choose(4, "a", {"a": 0, "b": 200}) == "a"
    assert router.choose(4, "a", {"a": 0, "b": 0}) == "b"


# --- through the engine -------------------------------------------------------------------------


def test_adaptive_follows_the_drafter_that_is_accepted_when_the_text_changes() -> None:
    backend = switching_backend()
    events = run(backend, PROMPT, route="adaptive", k=4, max_tokens=140)
    chosen = routes(events)
    # The request router's choice (the first drafter) serves first; `late`, untried, is credited
    # the most a round commits at early's round time, which only ties early's record (every draft
    # kept): it is tried once at most before the change. None is priced at the verify pass (its
    # bound) without serving, and early's drafts pay more than that.
    assert chosen[0] == "early"
    starts = [r.token_index + len(PROMPT) for r in rounds(events)]
    before = [c for c, s in zip(chosen, starts, strict=True) if s < CHANGE_AT]
    after = [c for c, s in zip(chosen, starts, strict=True) if s >= CHANGE_AT]
    assert before.count("late") <= 1 and before.count("early") >= len(before) - 1
    # Within a few rounds of the change, `late` serves, and keeps serving.
    first_late = after.index("late")
    assert first_late <= 4, after
    assert after[first_late:].count("late") >= len(after[first_late:]) - 2
    metrics = done(events).metrics
    assert metrics["route_switches"] >= 2
    assert {"early", "late"} <= set(metrics["rounds_by_route"]) <= {"early", "late", "none"}
    assert metrics["rounds_by_route"].get("none", {"rounds": 0})["rounds"] <= 2


def test_adaptive_beats_either_drafter_alone_when_the_text_changes() -> None:
    """Tokens per second on the scripted clock: every time is the work done."""
    speeds = {}
    for route in ("early", "late", "adaptive"):
        speeds[route] = done(run(switching_backend(), PROMPT, route=route, k=4, max_tokens=140)).metrics["tokens_per_s"]
    assert speeds["adaptive"] > 1.2 * max(speeds["early"], speeds["late"]), speeds


def test_with_full_information_adaptive_routes_every_round_to_the_best_drafter() -> None:
    """Stationary drafters, each judged every round (counterfactual routes): after the request
    router's pick serves the first round, adaptive routes to the drafter with the best rate in
    hindsight (none, priced at the verify pass, never pays here), and commits what a run pinned to
    it commits (greedy: the same tokens)."""
    target = seeded(TARGET_SEED)
    backend = backend_of({"bad": seeded(1), "good": target}, lookup=True)
    adaptive = run(backend, PROMPT, route="adaptive", counterfactual=True, k=4, max_tokens=60)
    pinned = run(backend, PROMPT, route="good", counterfactual=True, k=4, max_tokens=60)
    assert routes(adaptive)[:1] == ["bad"]  # the request router's pick: the first drafter
    assert set(routes(adaptive)[1:]) == {"good"}
    assert done(adaptive).token_ids == done(pinned).token_ids
    assert all(r.num_accepted == r.nodes for r in rounds(adaptive)[1:])  # the target itself: every draft kept
    # The best drafter in hindsight is the one the counterfactual account ranks first.
    by_drafter = done(adaptive).metrics["counterfactual"]
    assert max(by_drafter, key=lambda name: by_drafter[name]["mean_acceptance_length"]) == "good"


def test_catch_up_is_counted_in_the_round_that_pays_it() -> None:
    """A live switch to a drafter that never drafted: its cache takes in the whole context first,
    one forward pass of that many rows on the scripted clock, inside the round's draft_ms."""
    backend = backend_of({"one": seeded(TARGET_SEED), "two": seeded(TARGET_SEED)})

    def switch_after_three(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent) and event.index == 2:
            controls.update(route="two")

    events = run(backend, PROMPT, route="one", k=4, max_tokens=40, on_event=switch_after_three)
    switched = next(r for r in rounds(events) if r.drafter == "two")
    context = len(PROMPT) + switched.token_index
    assert switched.catch_up_tokens == context - 1  # every committed token but the last, which drafting feeds
    assert switched.catch_up_ms == pytest.approx(DRAFTER_COST.step_ms + DRAFTER_COST.row_ms * (context - 1))
    assert switched.draft_ms > switched.catch_up_ms
    after = [r for r in rounds(events) if r.index > switched.index]
    assert all(r.catch_up_tokens == 0 and r.catch_up_ms == 0 for r in after)
    metrics = done(events).metrics
    assert metrics["catch_up_tokens"] == switched.catch_up_tokens
    assert metrics["catch_up_ms"] == pytest.approx(switched.catch_up_ms)
    assert metrics["route_switches"] == 1
    assert {name: record["rounds"] for name, record in metrics["rounds_by_route"].items()} == {
        "one": 3,
        "two": len(rounds(events)) - 3,
    }


def test_adaptive_catch_ups_take_in_what_was_committed_meanwhile() -> None:
    """A drafter's cache holds, after a round it drafted, every committed token but the last
    (a rejection) or but the last two (all accepted: it never saw its own last draft); a
    catch-up brings it to all but the last."""
    backend = switching_backend()
    events = run(backend, PROMPT, route="adaptive", k=4, max_tokens=140)
    held = {"early": len(PROMPT) - 1}  # prefilled with the prompt
    previous = "early"
    for event in rounds(events):
        context = len(PROMPT) + event.token_index
        if event.drafter == "none":  # no cache to catch up
            assert event.catch_up_tokens == 0
            continue
        expected = 0 if event.drafter == previous else context - 1 - held.get(event.drafter, 0)
        assert event.catch_up_tokens == expected, event.index
        fully_accepted = event.num_accepted == event.nodes
        held[event.drafter] = context + len(event.tokens) - (2 if fully_accepted else 1)
        previous = event.drafter


def test_adaptive_is_refused_where_a_server_drafts_by_itself() -> None:
    with pytest.raises(ConfigError, match="adaptive picks a drafter every round"):
        check_supported(SpecSettings(route="adaptive"), vllm_native(baseline=True))


def test_an_untimed_observation_counts_tokens_not_time() -> None:
    """A free proposal judged after the round (round_ms None): its tokens count, its time is the
    pooled prior until the drafter serves a round of its own."""
    router = RoundRouter(("model", "lookup"))
    router.observe(RoundObservation("model", 2, 30.0), [RoundObservation("lookup", 4, None)])
    assert router.estimates["lookup"].seen and router.estimates["lookup"].timed == 0
    assert router.round_ms("lookup") == pytest.approx(30.0)  # the pooled mean, no time of its own
    assert router.choose(4, "model", {}) == "lookup"  # 4 tokens in about the same time


def test_a_free_proposal_is_judged_once_the_text_reaches_its_end() -> None:
    """Against the target's greedy tokens committed since it was made: kept up to the first that
    differs; undecided while they match but stop short (the routed drafter's round committed
    fewer tokens than lookup proposed: lookup is not charged for what that round left unsaid)."""
    assert kept_of_proposal([5, 6, 7, 8], [5, 6, 9]) == 2
    assert kept_of_proposal([5, 6, 7, 8], [9]) == 0
    assert kept_of_proposal([5, 6, 7, 8], [5, 6]) is None
    assert kept_of_proposal([5, 6, 7, 8], [5, 6, 7, 8, 1, 2]) == 4
    assert kept_of_proposal([], [1]) == 0
    assert kept_of_proposal([], []) == 0


def test_a_drafters_round_time_holds_while_it_sits_out() -> None:
    """`lookup` served one 10 ms round; then 40 rounds of `model` at 40 ms, lookup judged for
    free (untimed) in each. Its time is its own 10 ms, drawn a little toward the pool, not
    faded into the model's 40 ms: with as many tokens a round, lookup's rate is higher."""
    router = RoundRouter(("model", "lookup"))
    router.observe(RoundObservation("lookup", 3, 10.0))
    for _ in range(40):
        router.observe(RoundObservation("model", 3, 40.0), [RoundObservation("lookup", 3, None)])
    assert router.round_ms("lookup") < 25.0
    assert router.round_ms("model") == pytest.approx(40.0, rel=0.05)
    assert router.choose(4, "model", {}) == "lookup"


def test_under_adaptive_greedy_a_free_proposal_is_judged_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt lookup proposes for free: in the rounds another drafter serves, it is judged
    against the committed tokens (the target's greedy ones) and the round router learns of it,
    untimed. The prompt repeats itself, so lookup's proposals are often kept."""
    seen: list[tuple[RoundObservation | None, tuple[RoundObservation, ...]]] = []
    chosen: list[tuple[str, int]] = []

    class Recording(RoundRouter):
        def choose(
            self, k: int, current: str, lags: Mapping[str, int], proposing: Mapping[str, int] | None = None
        ) -> str:
            choice = super().choose(k, current, lags, proposing)
            chosen.append((choice, (proposing or {})["lookup"]))
            return choice

        def observe(
            self, routed: RoundObservation | None, others: Sequence[RoundObservation] = (), matching: Iterable[str] = ()
        ) -> None:
            seen.append((routed, tuple(others)))
            super().observe(routed, others, matching)

    monkeypatch.setattr("specplay.engine.loop.RoundRouter", Recording)
    backend = backend_of({"far": seeded(1)}, lookup=True)
    prompt = "the keeper climbed the stairs. " * 6
    events = run(backend, prompt, route="adaptive", k=4, max_tokens=80)
    assert len(seen) == len(chosen) == len(rounds(events))
    for (routed, _), (choice, lookup_proposes), event in zip(seen, chosen, rounds(events), strict=True):
        assert choice == event.drafter
        assert choice in ("far", "none") or lookup_proposes > 0  # lookup with nothing to copy is passed over
        # A round that drafted nothing is no drafter's record (but none's, its choice); every other is, timed.
        assert (routed is None) == (event.nodes == 0 and event.drafter != "none")
        assert routed is None or (routed.drafter == event.drafter and routed.round_ms is not None)
    free = [other for _, others in seen for other in others]
    # Each round lookup did not serve but proposed in is judged once the text reaches the proposal's end.
    proposed_in_far_rounds = sum(choice != "lookup" and n > 0 for choice, n in chosen)
    assert proposed_in_far_rounds - 2 <= len(free) <= proposed_in_far_rounds
    assert all(o.drafter == "lookup" and o.round_ms is None and 1 <= o.tokens <= 5 for o in free)
    # Sampled, nothing is judged for free: the committed tokens are not the target's argmax.
    seen.clear()
    run(backend, prompt, route="adaptive", k=4, max_tokens=40, temperature=1.0)
    assert all(others == () for _, others in seen)
