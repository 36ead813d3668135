"""`none`, the route of no speculation: a speculative lane whose rounds draft nothing, each one
target step through the same engine and events; a route map may send a class to it, and adaptive
routing chooses it where every drafter loses. On the scripted backend, whose clock charges each
forward pass exactly."""

from __future__ import annotations

import pytest

from specplay.catalog.models import CATALOG
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.routers.rounds import RoundObservation, RoundRouter
from specplay.engine.routers.routing import CodeProseRouter
from specplay.engine.settings import SpecSettings
from specplay.errors import ConfigError
from tests.support.engine_runs import done, rounds, run, sources
from tests.support.scripted import (
    TARGET_SEED,
    Cost,
    ScriptedBackend,
    ScriptedModel,
    scripted_backend,
    scripted_engine,
    seeded,
)

PROMPT = "the keeper climbed the stairs"


def losing_backend() -> ScriptedBackend:
    """Two drafters that both lose: `far` is cheap but rarely accepted; `self` is the target itself,
    always accepted, but dearer than the target, so a round of k costs more than k + 1 steps."""
    target = seeded(TARGET_SEED)
    dear = Cost(step_ms=15.0, row_ms=1.5)
    return ScriptedBackend(
        ScriptedModel("target", target),
        [ScriptedModel("far", seeded(1), Cost(step_ms=2.0, row_ms=0.2)), ScriptedModel("self", target, dear)],
    )


def tokens_per_s(events: list) -> float:
    return done(events).metrics["tokens_per_s"]


def test_none_is_target_decoding_through_the_rounds() -> None:
    """Greedy: the target-only lane's tokens, every round a target step that drafts nothing and
    commits one `target` token; no drafter ever runs; its speed is target-only's exactly."""
    backend = scripted_backend()
    events = run(backend, PROMPT, route="none", k=4, max_tokens=40)
    target_only = run(backend, PROMPT, mode="target", max_tokens=40)
    assert done(events).token_ids == done(target_only).token_ids
    assert all(r.drafter == "none" and r.nodes == 0 and r.num_accepted == 0 for r in rounds(events))
    assert len(rounds(events)) == 40
    assert set(sources(events)) == {"target"}
    metrics = done(events).metrics
    assert metrics["mean_acceptance_length"] == 1.0 and metrics["num_draft_tokens"] == 0
    assert tokens_per_s(events) == pytest.approx(tokens_per_s(target_only))
    assert {name for name, _ in backend.forwards} == {"target"}


def test_a_live_change_to_none_and_back_catches_the_drafter_up() -> None:
    def change(event, controls) -> None:  # type: ignore[no-untyped-def]
        index = getattr(event, "index", None)
        if index == 2:
            controls.update(route="none")
        elif index == 6:
            controls.update(route="self")

    events = run(scripted_backend(), PROMPT, route="self", k=4, max_tokens=60, on_event=change)
    routed = [r.drafter for r in rounds(events)]
    assert routed[:3] == ["self"] * 3 and routed[3:7] == ["none"] * 4 and set(routed[7:]) == {"self"}
    back, last_before = rounds(events)[7], rounds(events)[2]
    # The four tokens the none rounds committed, and, where its last draft was kept whole, the
    # last drafted token, which it never took in.
    assert back.catch_up_tokens == 4 + (last_before.num_accepted == last_before.nodes)
    assert done(events).token_ids == done(run(scripted_backend(), PROMPT, mode="target", max_tokens=60)).token_ids


def test_a_route_map_sends_a_class_to_none_and_auto_says_why() -> None:
    engine = scripted_engine(route_map={"prose": "none"}, notes={"prose": "far measured 0.40× here"})
    assert CodeProseRouter().classify(PROMPT) == "prose"
    choice = engine.routing.choice(PROMPT)
    assert choice.drafter == "none"
    assert choice.describe() == "auto: prose prompt → none (the route map: far measured 0.40× here)"
    assert engine.routing.choice("def f(x):\n    return x + 1\n").drafter != "none"
    events = run(engine.backend, PROMPT, route="auto", k=4, max_tokens=20)
    # run() builds its own engine without the map; the engine above is what routes
    assert engine.routing.choice(PROMPT).drafter == "none"
    assert rounds(events)


def test_draft_only_on_none_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="none, which drafts nothing"):
        run(scripted_backend(), PROMPT, mode="draft", route="none")


def test_adaptive_chooses_none_where_every_drafter_loses() -> None:
    """Each drafter alone is slower than the target; adaptive tries each once, then routes most
    rounds to none, and ends above either drafter and near target-only speed (what it still
    loses is exploration: each drafter's first round and catch-ups, and the retries that
    discounting makes of drafters that lost)."""
    speeds = {route: tokens_per_s(run(losing_backend(), PROMPT, route=route, k=4, max_tokens=200)) for route in
              ("far", "self", "none", "adaptive")}  # fmt: skip
    target_only = tokens_per_s(run(losing_backend(), PROMPT, mode="target", max_tokens=200))
    assert max(speeds["far"], speeds["self"]) < 0.95 * target_only, speeds
    assert speeds["adaptive"] >= 0.8 * target_only, (speeds, target_only)
    assert speeds["adaptive"] > max(speeds["far"], speeds["self"])
    routed = [r.drafter for r in rounds(run(losing_backend(), PROMPT, route="adaptive", k=4, max_tokens=200))]
    assert routed.count("none") >= 0.8 * len(routed), routed


def test_adaptive_keeps_a_drafter_that_pays() -> None:
    """`cheap` is the target itself at a fifth of its cost: it pays, and none never serves: priced
    at the verify pass (more than a target step), it loses to cheap's rounds from the start."""
    target = seeded(TARGET_SEED)
    backend = ScriptedBackend(ScriptedModel("target", target), [ScriptedModel("cheap", target, Cost(2.0, 0.2))])
    events = run(backend, PROMPT, route="adaptive", k=4, max_tokens=100)
    assert [r.drafter for r in rounds(events)].count("none") == 0


def test_none_is_priced_at_the_verify_pass_until_it_serves_then_at_its_own_time() -> None:
    """Its one token per round is certain (no optimism). Until it serves, its time is the drafting
    rounds' verify and host time (a target step costs no more); then its own rounds', not drawn
    toward the drafting rounds' (which cost more)."""
    router = RoundRouter(("a", "none"))
    router.observe(RoundObservation("a", 5, 40.0, verify_ms=30.0))
    assert router.round_ms("none") == pytest.approx(30.0)
    assert router.choose(4, "a", {}) == "a"  # 1 / 30 < half of 5 / 40: not worth a round to time
    router = RoundRouter(("a", "none"))
    router.observe(RoundObservation("a", 2, 40.0, verify_ms=30.0))
    assert router.choose(4, "a", {}) == "none"  # 1 / 30 > half of 2 / 40: it may win, so it is timed
    router = RoundRouter(("a", "none"))
    router.observe(RoundObservation("a", 2, 40.0, verify_ms=12.0))
    assert router.choose(4, "a", {}) == "none"  # 1 / 12 > 2 / 40 even at the bound: it serves
    router.observe(RoundObservation("none", 1, 15.0))
    assert router.round_ms("none") == pytest.approx(15.0)
    assert router.choose(4, "none", {}) == "none"  # 1 / 15 > 2 / 40, whatever the bonus of `a`
    router = RoundRouter(("a", "none"))
    router.observe(RoundObservation("a", 2, 40.0))
    router.observe(RoundObservation("none", 1, 25.0))
    assert router.choose(4, "none", {}) == "a"  # 2 / 40 = 0.05 > 1 / 25 = 0.04


def test_smollm2_routes_no_class_to_a_drafter_that_lost_here() -> None:
    """The shipped map sends prose to none: the early exit measured below target-only speed on
    prose (benchmarks/RESULTS.md), and says so where auto chooses."""
    smollm2 = CATALOG["smollm2"]
    assert dict(smollm2.route_map) == {"code": "lookup", "prose": "none"}
    assert "exit measured" in dict(smollm2.route_notes)["prose"]


def test_where_the_request_router_chose_none_a_model_drafter_is_not_tried() -> None:
    """`hold_back` (auto sent the prompt to none: its map says the drafters lose here): `model`
    never serves unless it has served before; `look`, a free drafter, serves only once its judged
    proposals commit two tokens a round or more."""
    router = RoundRouter(("none", "model", "look"), hold_back=True)
    assert router.choose(4, "none", {}, proposing={"look": 4}) == "none"
    for _ in range(3):
        router.observe(RoundObservation("none", 1, 10.0), [RoundObservation("look", 1, None)])
        assert router.choose(4, "none", {}, proposing={"look": 4}) == "none"
    for _ in range(6):
        router.observe(RoundObservation("none", 1, 10.0), [RoundObservation("look", 5, None)])
    assert router.choose(4, "none", {}, proposing={"look": 4}) == "look"  # its copies pay: timed now
    plain = RoundRouter(("none", "model", "look"))
    assert plain.choose(4, "none", {}, proposing={"look": 4}) == "model"  # without it: each serves once


def test_adaptive_from_none_stays_near_none_where_every_drafter_loses() -> None:
    """The losing drafters behind a route map that sends prose to none: adaptive starts at none,
    never tries the drafters, and keeps target-only speed (within 2%)."""
    engine = scripted_engine(losing_backend(), route_map={"prose": "none"})
    assert engine.routing.choice(PROMPT).drafter == "none"

    def generated(route: str) -> list:
        request = Request(PROMPT, tuple(engine.encode(PROMPT, raw=True)), "speculative", 0, 200, ignore_eos=True)
        return list(engine.generate(request, LiveControls(SpecSettings(k=4, route=route), engine.drafters)))

    events, none = generated("adaptive"), generated("none")
    assert {r.drafter for r in rounds(events)} == {"none"}
    assert tokens_per_s(events) >= 0.98 * tokens_per_s(none)
