"""`--route adaptive` where one drafter is far dearer than a target step (SmolLM2's early exit: a
round costs six target steps) and another proposes for free (prompt lookup): the dear one is not
tried again once its round time shows it cannot pay, and under `none` a passage the answer starts
to copy is followed within a round. The round router alone, then through the engine on the
scripted backend, whose clock charges each forward pass exactly."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specplay.engine.events import Event
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.routers.rounds import RoundObservation, RoundRouter
from specplay.engine.settings import SpecSettings
from tests.support.engine_runs import done, rounds
from tests.support.scripted import (
    TARGET_SEED,
    Cost,
    ScriptedBackend,
    ScriptedModel,
    encode_bytes,
    noisy,
    scripted_engine,
    seeded,
)

# --- the round router alone ---------------------------------------------------------------------


def _lookup_and_none(router: RoundRouter, rounds_: int) -> list[str]:
    """`rounds_` rounds in which prompt lookup proposes every fifth round (keeping one token of
    four, 120 ms) and nothing otherwise, `none` taking 85 ms a round: the routed drafters."""
    chosen = []
    current = "exit"
    for i in range(rounds_):
        proposing = {"lookup": 4 if i % 5 == 0 else 0}
        current = router.choose(4, current, {"exit": 3, "lookup": 0, "none": 0}, proposing)
        chosen.append(current)
        if current == "lookup":
            router.observe(RoundObservation("lookup", 2, 120.0, verify_ms=118.0))
        elif current == "none":
            router.observe(RoundObservation("none", 1, 85.0))
        else:
            router.observe(RoundObservation(current, 2, 500.0, verify_ms=120.0))
    return chosen


def test_a_drafter_whose_round_costs_more_than_k_plus_one_tokens_is_not_tried_again() -> None:
    """The early exit served once: 500 ms for 2 tokens, where `none` commits a token in 85 ms.
    Even were all four of its drafts kept (5 tokens, the most a round of k 4 commits) it would
    lose, so however its record ages it is not tried again. (Its time drawn toward prompt
    lookup's cheap rounds, or its optimism let past k + 1 tokens, it was tried again within
    80 rounds.)"""
    router = RoundRouter(("exit", "lookup", "none"))
    router.choose(4, "exit", {}, {"lookup": 0})  # the request router's pick serves first
    router.observe(RoundObservation("exit", 2, 500.0, verify_ms=120.0))
    chosen = _lookup_and_none(router, 150)
    assert "exit" not in chosen
    assert chosen.count("lookup") == 30  # every round it proposes: 2 tokens in 120 ms beat none's 85
    assert router.round_ms("exit") == pytest.approx(500.0)  # lookup's verify passes are no prior for a drafting round


def test_free_drafters_rounds_are_no_prior_for_a_model_drafters_round() -> None:
    """The pool a model drafter's time is drawn toward holds the model drafters' rounds: prompt
    lookup's 20 ms rounds leave `slow` at its own 100 ms; a second model drafter's 40 ms draw it
    down by one pseudo-round of the pool."""
    router = RoundRouter(("slow", "lookup", "quick"))
    router.choose(4, "slow", {}, {"lookup": 4})  # lookup is learned to be free
    router.observe(RoundObservation("slow", 3, 100.0))
    for _ in range(10):
        router.observe(RoundObservation("lookup", 3, 20.0))
    assert router.round_ms("slow") == pytest.approx(100.0)
    assert router.round_ms("lookup") == pytest.approx(20.0)
    router.observe(RoundObservation("quick", 3, 40.0))
    pooled = (0.95 * 100.0 + 40.0) / (0.95 + 1.0)
    assert router.round_ms("slow") == pytest.approx((100.0 + pooled) / 2)


def test_under_hold_back_a_free_drafter_whose_waiting_proposal_matches_serves_at_once() -> None:
    """Where auto sent the prompt to `none`, prompt lookup first serves once its judged
    proposals keep a token a round; a proposal of 4 is judged only 4 `none` rounds after it was
    made. One whose first token the next round committed (`matching`) lets it serve at once."""
    router = RoundRouter(("none", "exit", "lookup"), hold_back=True)
    assert router.choose(4, "none", {}, {"lookup": 4}) == "none"
    router.observe(RoundObservation("none", 1, 85.0))
    assert router.choose(4, "none", {}, {"lookup": 4}) == "none"  # nothing judged, nothing matching
    router.observe(RoundObservation("none", 1, 85.0), matching={"lookup"})
    assert router.choose(4, "none", {}, {"lookup": 4}) == "lookup"
    assert router.choose(4, "none", {}, {"lookup": 0}) == "none"  # nothing to propose: passed over
    router.observe(RoundObservation("none", 1, 85.0))  # the match ended without a judgement yet
    assert router.choose(4, "none", {}, {"lookup": 4}) == "none"
    assert "exit" not in {router.choose(4, "none", {}, {"lookup": 0}) for _ in range(3)}


# --- through the engine -------------------------------------------------------------------------

PROMPT = (
    "Summarise the harbour notes and quote the rule they end with. The boats went out at dawn and came back "
    "late, and the rule on the board said: every boat is tied up by nine and its lamp is lit before the bell."
)
ANSWER = (
    "The notes end with the rule: every boat is tied up by nine and its lamp is lit before the bell. In short, "
    "the boats kept long hours on the water, out early and home after dark most days, with the rule: every boat "
    "is tied up by nine and its lamp is lit before the bell. That seems fair to all, since the fog comes in fast "
    "and a boat without a lamp is hard to find, whatever the tide is doing then."
)
"""What the target writes: a quoted passage (prompt lookup copies it), new sentences (it cannot),
the passage again."""
TARGET_COST = Cost(step_ms=10.0, row_ms=1.0)
EXIT_COST = Cost(step_ms=14.0, row_ms=1.0)
"""A round of 4 drafts and the verify pass: about six target steps, as SmolLM2's early exit."""


def _writes_answer(prompt_tokens: int) -> object:
    answer, other = encode_bytes(ANSWER), seeded(TARGET_SEED)

    def logits(context: Sequence[int]) -> np.ndarray:
        scores = 0.1 * other(context)
        at = len(context) - prompt_tokens
        if 0 <= at < len(answer):
            scores[answer[at]] = 50.0
        return scores

    return logits


def _engine(**routing: object) -> SpecEngine:
    target = _writes_answer(len(encode_bytes(PROMPT)))
    exit_ = ScriptedModel("exit", noisy(target, 3, 40.0), EXIT_COST)  # type: ignore[arg-type]
    backend = ScriptedBackend(ScriptedModel("target", target, TARGET_COST), [exit_], lookups={"lookup": (1, 3)})  # type: ignore[arg-type]
    return scripted_engine(backend, **routing)


def _generate(engine: SpecEngine, route: str) -> list[Event]:
    ids = tuple(engine.encode(PROMPT, raw=True))
    request = Request(PROMPT, ids, "speculative", 0, len(encode_bytes(ANSWER)), ignore_eos=True)
    return list(engine.generate(request, LiveControls(SpecSettings(k=4, route=route), engine.drafters)))


def _speeds(**routing: object) -> dict[str, float]:
    return {
        route: done(_generate(_engine(**routing), route)).metrics["tokens_per_s"]
        for route in ("lookup", "exit", "none", "adaptive")
    }


def test_adaptive_keeps_up_with_lookup_and_tries_the_dear_drafter_once() -> None:
    """The request router sends the prompt to the early exit: it serves the first round, then
    never again; adaptive keeps within 2% of prompt lookup pinned, the best single route
    (0.87× when it tried the exit again mid-run)."""
    engine = _engine()
    assert engine.routing.choice(PROMPT).drafter == "exit"
    routed = [r.drafter for r in rounds(_generate(engine, "adaptive"))]
    assert routed[0] == "exit" and "exit" not in routed[1:]
    speeds = _speeds()
    assert max(speeds, key=lambda route: speeds[route]) == "lookup"
    assert speeds["adaptive"] >= 0.98 * speeds["lookup"], speeds


def test_under_none_adaptive_follows_a_copied_passage_within_a_round() -> None:
    """Auto sends prose to `none` here (as SmolLM2's map does), so adaptive starts there; the
    answer opens by quoting the prompt. Prompt lookup serves from the round after its first
    proposal whose first token was kept, not four rounds later, and adaptive is within 1% of
    lookup pinned."""
    engine = _engine(route_map={"prose": "none"})
    assert engine.routing.choice(PROMPT).drafter == "none"
    routed = [r.drafter for r in rounds(_generate(engine, "adaptive"))]
    assert routed[:2] == ["none", "none"] and routed[2] == "lookup", routed[:8]
    assert "exit" not in routed
    speeds = _speeds(route_map={"prose": "none"})
    assert speeds["adaptive"] >= 0.99 * speeds["lookup"], speeds


def test_an_untried_model_drafter_serves_only_once_it_could_beat_the_best_on_record() -> None:
    """`prose` served the first round (3 tokens, 22 ms); prompt lookup then copies whole
    proposals in 16 ms rounds. `base`, never tried, is credited the most a round commits (5 tokens)
    at the model drafters' time (22 ms): 0.23 tokens a ms, below lookup's 0.31, so it is not given a
    round while lookup copies; once lookup keeps nothing (a token in 16 ms), it is."""
    router = RoundRouter(("prose", "base", "lookup", "none"))
    router.observe(RoundObservation("prose", 3, 22.0, verify_ms=15.0))
    chosen = []
    for _ in range(20):
        chosen.append(router.choose(4, chosen[-1] if chosen else "prose", {}, {"lookup": 4}))
        router.observe(RoundObservation(chosen[-1], 5, 16.0, verify_ms=15.0))
    assert set(chosen) == {"lookup"}
    for _ in range(6):
        current = router.choose(4, "lookup", {}, {"lookup": 4})
        router.observe(RoundObservation(current, 1, 16.0, verify_ms=15.0))
    assert current == "base" or router.estimates["base"].timed
