"""The cost line explains a loss: below 1× the round account's term that cost most beyond what it
won, in words (`speedup.loss_reason`); at 1× or more nothing is added."""

from __future__ import annotations

import textwrap

import pytest

from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.speedup import RoundAccount, loss_reason, who_drafted
from specplay.ui.stats import LaneTally, compare
from specplay.ui.widgets.stats_view import speculative_stats
from tests.support.engine_runs import run
from tests.support.prompts import PROSE_PROMPT
from tests.support.scripted import Cost, ScriptedBackend, ScriptedModel, scripted_backend, seeded

DRAFT_PHRASE = "a round costs more than the tokens it wins"


def test_an_early_exit_that_costs_more_than_it_keeps_blames_drafting() -> None:
    # exit after 26 of 30 layers, k 4: 3.3 target steps of drafting for 0.92 kept drafts a round
    account = RoundAccount(draft_steps=3.3, verify_steps=1.2, host_steps=0.02, tokens=1.92)
    loss = loss_reason(account, "exit", drafts_per_round=4.0, draft_acceptance_rate=0.23)
    assert loss is not None and loss.term == "draft"
    assert loss.loss_steps == pytest.approx(3.3 - 0.92)
    assert loss.sentence == (
        "exit drafts cost 0.82 target steps a token and 23% are kept: a round costs more than the tokens it wins"
    )


def test_a_drafter_that_drafts_nothing_is_a_target_step_plus_overhead() -> None:
    # prompt lookup finding nothing to copy: every round verifies one row and commits one token
    account = RoundAccount(draft_steps=0.0, verify_steps=1.12, host_steps=0.03, tokens=1.0)
    for drafts_per_round in (0.0, None):
        loss = loss_reason(account, "lookup", drafts_per_round, draft_acceptance_rate=None)
        assert loss is not None and loss.term == "nothing drafted"
        assert loss.loss_steps == pytest.approx(0.15)
        assert loss.sentence == (
            "lookup drafted nothing: a round is one target step plus 0.15 steps of overhead (verify 1.12, host 0.03)"
        )


def test_a_verify_pass_dearer_than_the_kept_drafts_blames_verify() -> None:
    # free drafts (prompt lookup), 0.30 kept a round, but verifying the rows costs 0.45 over a step
    account = RoundAccount(draft_steps=0.0, verify_steps=1.45, host_steps=0.05, tokens=1.30)
    loss = loss_reason(account, "lookup", drafts_per_round=0.5, draft_acceptance_rate=0.6)
    assert loss is not None and loss.term == "verify"
    assert loss.loss_steps == pytest.approx(0.45)
    assert loss.sentence == (
        "verify costs 0.45 target steps over a step a round, host 0.05: more than the 0.30 drafts kept"
    )


def test_host_work_larger_than_the_win_blames_the_host() -> None:
    # drafting pays for itself (0.45 kept for 0.15 steps); 0.60 steps of host work a round do not
    account = RoundAccount(draft_steps=0.15, verify_steps=1.05, host_steps=0.60, tokens=1.45)
    loss = loss_reason(account, "near", drafts_per_round=2.0, draft_acceptance_rate=0.25)
    assert loss is not None and loss.term == "host"
    assert loss.sentence == (
        "host costs 0.60 target steps a round (verify 0.05 over one):"
        " more than the drafts win (0.45 kept for 0.15 steps)"
    )
    cheaper_verify = RoundAccount(draft_steps=0.15, verify_steps=0.95, host_steps=0.60, tokens=1.45)
    loss = loss_reason(cheaper_verify, "near", drafts_per_round=2.0, draft_acceptance_rate=0.25)
    assert loss is not None and "(verify 0.05 under one)" in loss.sentence


def test_the_term_that_lost_most_is_named_even_where_drafting_loses_too() -> None:
    # drafting loses 0.1 steps (0.5 for 0.4 kept), verify 0.5: verify is named, with what the drafts win
    account = RoundAccount(draft_steps=0.5, verify_steps=1.5, host_steps=0.0, tokens=1.4)
    loss = loss_reason(account, "near", drafts_per_round=1.0, draft_acceptance_rate=0.4)
    assert loss is not None and loss.term == "verify"
    assert loss.sentence == (
        "verify costs 0.50 target steps over a step a round: more than the drafts win (0.40 kept for 0.50 steps)"
    )


@pytest.mark.parametrize(
    "account",
    [
        RoundAccount(draft_steps=0.5, verify_steps=1.0, host_steps=0.0, tokens=2.0),  # 1.33×
        RoundAccount(draft_steps=0.0, verify_steps=1.0, host_steps=0.0, tokens=1.0),  # exactly 1×
        RoundAccount(draft_steps=0.0, verify_steps=0.0, host_steps=0.0, tokens=0.0),  # nothing timed
    ],
)
def test_nothing_is_said_where_speculation_does_not_lose(account: RoundAccount) -> None:
    assert loss_reason(account, "near", drafts_per_round=2.0, draft_acceptance_rate=0.5) is None


def test_every_sentence_fits_two_lines_of_a_lane() -> None:
    """The lane's stats are 57 columns wide in the playground's snapshots (SIZE): wrapped at words
    there, each sentence takes two lines at most."""
    cases = [
        (RoundAccount(3.3, 1.2, 0.02, 1.92), 4.0, 0.23),
        (RoundAccount(0.0, 1.12, 0.03, 1.0), 0.0, None),
        (RoundAccount(0.0, 1.45, 0.05, 1.30), 0.5, 0.6),
        (RoundAccount(0.15, 1.05, 0.60, 1.45), 2.0, 0.25),
        (RoundAccount(0.5, 1.5, 0.0, 1.4), 1.0, 0.4),
    ]
    for account, drafts_per_round, rate in cases:
        loss = loss_reason(account, "lookup", drafts_per_round, rate)  # the SmolLM2 set's longest name
        assert loss is not None and len(textwrap.wrap(loss.sentence, 57)) <= 2, loss.sentence


def _lanes(backend: ScriptedBackend, route: str, then: tuple[int, str] | None = None) -> tuple[LaneTally, LaneTally]:
    """A speculative and a target-only lane of one prompt, each on its own clock (the scripted
    backend's, which moves only as the models compute), as the playground tallies them; `then`:
    after that many rounds the route changes live to the one named."""
    lanes = []
    for mode in ("speculative", "target"):
        tally, start_s = LaneTally(), backend.clock()

        def take(event: Event, controls: LiveControls, tally: LaneTally = tally, start_s: float = start_s) -> None:
            tally.add(event, busy_s=backend.clock() - start_s)
            if then is not None and isinstance(event, RoundEvent) and tally.rounds == then[0]:
                controls.update(route=then[1])

        run(backend, PROSE_PROMPT, mode=mode, route=route, k=4, max_tokens=40, on_event=take)
        lanes.append(tally)
    return lanes[0], lanes[1]


def test_an_expensive_drafter_with_low_acceptance_names_drafting_on_the_cost_line() -> None:
    # a drafter of its own (rarely accepted) whose step costs 0.8 of the target's
    target = ScriptedModel("target", seeded(0), Cost(step_ms=10.0, row_ms=1.0))
    dear = ScriptedModel("dear", seeded(1), Cost(step_ms=8.0, row_ms=1.0))
    speculative, target_only = _lanes(ScriptedBackend(target, [dear]), "dear")
    comparison = compare(speculative, target_only)
    assert comparison.speedup is not None and comparison.speedup < 1
    lines = str(speculative_stats(speculative, comparison)).splitlines()
    account_line = next(i for i, line in enumerate(lines) if line.startswith("a round: "))
    loss = lines[account_line + 1]
    assert loss.startswith("dear drafts cost 0.") and loss.endswith(DRAFT_PHRASE)


def test_a_drafter_that_pays_adds_nothing_to_the_cost_line() -> None:
    speculative, target_only = _lanes(scripted_backend(), "near")  # near: often accepted, a fifth of the cost
    comparison = compare(speculative, target_only)
    assert comparison.speedup is not None and comparison.speedup > 1
    lines = str(speculative_stats(speculative, comparison)).splitlines()
    assert lines[-1].startswith("a round: ")  # the account is the last line: no loss sentence after it
    assert not any(DRAFT_PHRASE in line or "more than" in line for line in lines)


def test_a_route_changed_to_none_leaves_the_loss_with_the_drafter_that_drafted() -> None:
    """dear drafts (and loses) for 5 rounds, then the route goes to none: the loss is dear's."""
    target = ScriptedModel("target", seeded(0), Cost(step_ms=10.0, row_ms=1.0))
    dear = ScriptedModel("dear", seeded(1), Cost(step_ms=8.0, row_ms=1.0))
    speculative, target_only = _lanes(ScriptedBackend(target, [dear]), "dear", then=(5, "none"))
    assert speculative.last_round is not None and speculative.last_round.drafter == "none"  # what the old line named
    comparison = compare(speculative, target_only)
    assert comparison.speedup is not None and comparison.speedup < 1
    lines = str(speculative_stats(speculative, comparison)).splitlines()
    loss = lines[next(i for i, line in enumerate(lines) if line.startswith("a round: ")) + 1]
    assert loss.startswith("dear drafts cost 0.") and loss.endswith(DRAFT_PHRASE), loss


def test_the_loss_names_who_drafted_most_first_and_a_none_route_as_a_route() -> None:
    assert who_drafted({"exit": 12, "none": 0}, "none") == "exit"
    assert who_drafted({"near": 3, "none": 0, "exit": 40}, "near") == "exit and near"
    assert who_drafted({"near": 3, "far": 9, "exit": 40, "none": 0}, "none") == "exit, far and 1 more"
    assert who_drafted({"none": 0}, "none") == "route none"
    assert who_drafted({"lookup": 0}, "lookup") == "lookup"  # prompt lookup found nothing to copy
    assert who_drafted({}, None) == "the drafter"
    account = RoundAccount(draft_steps=0.0, verify_steps=1.1, host_steps=0.02, tokens=1.0)
    loss = loss_reason(account, who_drafted({"none": 0}, "none"), 0.0, None)
    assert loss is not None and loss.sentence.startswith("route none drafted nothing: a round is one target step")
