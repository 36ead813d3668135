"""Width: a rejection's correction ranked among the drafter's tokens (engine/correction_rank.py), from the
pure rule on hand-made distributions, through verify_rows, to the engine's events and metrics."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from specplay.engine.correction_rank import (
    LOGITS,
    OTHER,
    OTHER_RANK,
    RANK_TOP_N,
    correction_ranks,
    histogram_of,
    listed_rank,
    second_branch_share,
)
from specplay.engine.events import DraftPosition, RoundEvent
from specplay.engine.layout import chain
from specplay.engine.metrics import Metrics
from specplay.engine.rules import MENTORED
from specplay.engine.sampling import softmax
from specplay.engine.verify_rows import verify_rows
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import ScriptedBackend, ScriptedModel, encode_bytes, scripted_backend, table

# One drafter row: token 1 on top, 0 second, 2 and 3 tied third, 4 and 5 tied fifth, 6 no mass.
ROW = [0.3, 0.4, 0.1, 0.1, 0.05, 0.05, 0.0]


def test_ranks_count_the_tokens_the_drafter_gave_strictly_more() -> None:
    rows = np.array([ROW] * 7)
    ranks = correction_ranks(rows, np.arange(7), np).tolist()
    # Ties share their best rank; a rank past the top 4, or no mass at all, is "other".
    assert ranks == [2, 1, 3, 3, OTHER_RANK, OTHER_RANK, OTHER_RANK]
    assert RANK_TOP_N == 4 and OTHER_RANK == 5


def test_a_token_tied_with_the_drafters_top_ranks_first() -> None:
    assert correction_ranks(np.array([[0.4, 0.4, 0.2]]), np.array([1]), np).tolist() == [1]


def test_ranks_from_a_listing_agree_with_the_full_row() -> None:
    listed = {token: p for token, p in enumerate(ROW[:4])}
    assert [listed_rank(listed, token, listed_at_least=4) for token in range(4)] == [2, 1, 3, 3]
    # An unlisted token lies below a listing of the top 4 or more; below a shorter one it may not.
    assert listed_rank(listed, 5, listed_at_least=4) == OTHER_RANK
    assert listed_rank(listed, 5, listed_at_least=3) is None


def test_the_histogram_and_the_second_branch_share() -> None:
    histogram = histogram_of([2, 2, 3, None, 7, 1, OTHER_RANK])
    assert histogram == {"1": 1, "2": 2, "3": 1, "4": 0, OTHER: 2}
    assert second_branch_share(histogram) == pytest.approx(3 / 6)
    assert second_branch_share(histogram_of([None])) is None


def test_a_rank_no_engine_gives_counts_as_other() -> None:
    # Only a damaged session file holds one; the playground's tally of an opened session reads it.
    metrics = Metrics(speculative=True)
    positions = tuple(DraftPosition(1, 0.1, 0.9, 0.5, 0.8, 0.0, "rejected", correction_rank=r) for r in (0, -3, 10**9))
    metrics.add_round(RoundEvent(0, 0, "d", (1, 1, 1), chain(3), positions, 0, (), 1.0, 1.0, 0.0))
    assert metrics.to_dict()["rejection_rank_histogram"] == {"1": 0, "2": 0, "3": 0, "4": 0, OTHER: 3}


def test_verify_rows_ranks_each_correction_in_the_drafters_rows() -> None:
    # One-hot targets make each correction the target's token whatever the uniforms: 0, then 3.
    p_target = np.eye(7)[[0, 3, 2]]
    p_draft = np.array([ROW, ROW[::-1]])
    out = verify_rows(p_target, np.array([1, 4]), p_draft, np.array([0.3, 0.6, 0.5]), rule=MENTORED, n=0, xp=np)
    assert out["corrections"].tolist() == [0, 3]
    assert out["correction_rank"].tolist() == [2, 3]  # reversed ROW: 3 is tied third (0.1 with 4)
    # At temperature 0 p_draft is one-hot: ranked in the drafter's logits, where -inf is no mass.
    one_hot = np.eye(7)[[1, 1]]
    with np.errstate(divide="ignore"):
        logits = np.log(p_draft) + 1.5
    ranked = verify_rows(
        p_target, np.array([1, 1]), one_hot, np.array([0.3, 0.6, 0.5]), rule=MENTORED, n=0, xp=np, logits=logits
    )
    assert ranked["correction_rank"].tolist() == [2, 3]
    assert correction_ranks(logits, np.array([6, 0]), np, floor=LOGITS).tolist() == [OTHER_RANK, OTHER_RANK]


def _table_backend(target_row: list[float], drafter_row: list[float]) -> ScriptedBackend:
    return ScriptedBackend(ScriptedModel("target", table({}, target_row)), [ScriptedModel("d", table({}, drafter_row))])


@pytest.mark.parametrize(("target_top", "rank"), [(0, 2), (3, 3), (5, OTHER_RANK)])
def test_a_greedy_run_records_each_rejections_rank(target_top: int, rank: int) -> None:
    # The drafter always drafts its top, 1; the target always wants `target_top`: every round is
    # rejected at its first position with the same rank.
    target_row = [0.01] * 7
    target_row[target_top] = 0.9
    events = run(_table_backend(target_row, ROW), "ab", max_tokens=6, k=3)
    rejected = [p for r in rounds(events) for p in r.positions if p.outcome == "rejected"]
    assert len(rejected) == len(rounds(events)) == 6
    assert [p.correction_rank for p in rejected] == [rank] * 6
    assert all(p.correction_rank is None for r in rounds(events) for p in r.positions if p.outcome != "rejected")
    metrics = done(events).metrics
    assert metrics["rejection_rank_histogram"] == histogram_of([rank] * 6)
    assert metrics["second_branch_share"] == (1.0 if rank <= 2 else 0.0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_metrics_count_what_the_rounds_positions_say(temperature: float) -> None:
    backend = scripted_backend()
    events = run(backend, CODE_PROMPT, max_tokens=60, temperature=temperature, route="near", seed=2, k=4)
    ranks = [p.correction_rank for r in rounds(events) for p in r.positions if p.outcome == "rejected"]
    assert ranks and None not in ranks
    histogram = done(events).metrics["rejection_rank_histogram"]
    counted = Counter(str(r) if r <= RANK_TOP_N else OTHER for r in ranks)
    assert histogram == {key: counted.get(key, 0) for key in ("1", "2", "3", "4", OTHER)}
    saved = sum(r <= 2 for r in ranks)
    assert done(events).metrics["second_branch_share"] == pytest.approx(saved / len(ranks))


def test_greedy_ranks_are_the_drafters_own_softmax_ranks() -> None:
    backend = scripted_backend()
    prompt = encode_bytes(CODE_PROMPT)
    events = run(backend, CODE_PROMPT, max_tokens=60, route="near", k=4)
    generated = list(done(events).token_ids)
    checked = 0
    for event in rounds(events):
        for i, position in enumerate(event.positions):
            if position.outcome != "rejected":
                continue
            context = [*prompt, *generated[: event.token_index], *event.drafted[:i]]
            belief = softmax(backend.models["near"].logits(context), np)
            correction = generated[event.token_index + i]
            expected = 1 + int((belief > belief[correction]).sum())
            assert position.correction_rank == min(expected, OTHER_RANK)
            assert position.correction_rank >= 2  # the drafted token, the drafter's top, was rejected
            checked += 1
    assert checked


def test_prompt_lookup_has_no_rank_and_the_metrics_say_so() -> None:
    events = run(scripted_backend(drafters=("lookup",)), CODE_PROMPT * 2, max_tokens=40, route="lookup")
    positions = [p for r in rounds(events) for p in r.positions]
    assert any(p.outcome == "rejected" for p in positions)
    assert all(p.correction_rank is None for p in positions)
    metrics = done(events).metrics
    assert metrics["rejection_rank_histogram"] == histogram_of([]) and metrics["second_branch_share"] is None


def test_target_only_runs_have_no_width_metrics() -> None:
    metrics = done(run(scripted_backend(), CODE_PROMPT, mode="target", max_tokens=5)).metrics
    assert metrics["rejection_rank_histogram"] is None and metrics["second_branch_share"] is None
