"""What a round costs (engine/costs.py) and the speedup each k is predicted to give from it
(engine/speedup.py), on the scripted backend, whose clock moves only as its models compute: a
forward pass over n rows costs step + n x row, so every measured time has an exact value."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specplay.engine.costs import (
    REPEATS,
    RoundsMeasured,
    disturbance,
    measure_costs,
    measure_drafter,
    measure_drafting,
    measure_rounds,
    predict_drafter,
)
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.speedup import (
    break_even_alpha,
    expected_tokens,
    monotone,
    predict_by_k,
    predicted_speedup,
    reach_by_position,
    recommended_k,
    tokens_at_alpha,
)
from tests.support.checks import every
from tests.support.costs_clock import LoadedClock
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import Cost, scripted_backend, scripted_engine

GREEDY = SamplingParams()
LOSSLESS = SpecSettings().acceptance_rule


def test_the_verify_curve_the_step_and_each_drafters_step_are_what_the_models_compute() -> None:
    backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("near", "lookup"))
    prompt = backend.encode(CODE_PROMPT, raw=True)
    costs = measure_costs(scripted_engine(backend), prompt, GREEDY, LOSSLESS, max_rows=12, repeats=3)
    assert costs.target_step_ms.ms == pytest.approx(11.0) and costs.target_step_ms.spread_ms == pytest.approx(0)
    # k drafted tokens: one forward over k + 1 rows
    assert list(costs.verify_ms) == list(range(1, 13))
    for rows, timing in costs.verify_ms.items():
        assert timing.ms == pytest.approx(10.0 + rows) and timing.spread_ms == pytest.approx(0)
    # a drafter costs a fifth of the target (one row per step); prompt lookup computes nothing
    assert costs.draft_step_ms["near"].ms == pytest.approx(2.2) and costs.cost_ratio("near") == pytest.approx(0.2)
    # each scripted draft step is a forward of its own, so a draft call costs nothing by itself
    assert costs.call_ms("near") == pytest.approx(0.0, abs=1e-9)
    assert costs.draft_step_ms["lookup"].ms == 0 and not costs.includes_http
    # measuring commits nothing: every cache is back at the prompt
    generation = backend.open_generation(prompt)
    assert generation.tokens == prompt


def test_reach_and_expected_tokens_from_per_position_acceptance() -> None:
    measured = [0.8, 0.6, 0.3]  # kept / drafted at positions 1..3 (each includes the ones before)
    # past position 3, each token is kept with the last conditional rate, 0.3 / 0.6
    assert reach_by_position(measured, 5) == pytest.approx([0.8, 0.6, 0.3, 0.15, 0.075])
    assert reach_by_position(measured, 2) == pytest.approx([0.8, 0.6])
    assert expected_tokens(measured, 4) == pytest.approx(1 + 0.8 + 0.6 + 0.3 + 0.15)
    assert expected_tokens([], 3) == 1.0  # nothing measured: nothing expected to be kept
    # one α at every position: Leviathan's closed form
    alpha = 0.7
    assert expected_tokens([alpha**i for i in range(1, 9)], 8) == pytest.approx(tokens_at_alpha(alpha, 8))
    assert tokens_at_alpha(1.0, 4) == 5


def test_the_speedup_by_k_over_a_measured_verify_curve() -> None:
    measured = [0.8, 0.6, 0.3]
    verify = {rows: 10.0 + rows for rows in range(1, 9)}
    predictions = predict_by_k(measured, verify, draft_step_ms=2.2, target_step_ms=11.0, k_max=8)
    assert [p.k for p in predictions] == list(range(1, 8))  # k = 8 needs 9 rows: not measured
    for p in predictions:
        reach = [0.8, 0.6, 0.3, 0.15, 0.075, 0.0375, 0.01875][: p.k]
        assert p.round_ms == pytest.approx(2.2 * p.k + 10.0 + p.k + 1)
        assert p.speedup == pytest.approx((1 + sum(reach)) * 11.0 / p.round_ms)
        # at the break-even α a round commits its cost in target steps
        assert tokens_at_alpha(p.break_even_acceptance, p.k) == pytest.approx(p.round_ms / 11.0)
    # the host's work per round (a run's overhead_ms over its rounds) adds to every round
    with_host = predict_by_k(measured, verify, draft_step_ms=2.2, target_step_ms=11.0, k_max=8, host_ms=3.0)
    assert [p.round_ms for p in with_host] == pytest.approx([p.round_ms + 3.0 for p in predictions])
    # so does a draft call's own time, once a round whatever its length
    with_call = predict_by_k(measured, verify, draft_step_ms=2.2, target_step_ms=11.0, k_max=8, draft_call_ms=1.5)
    assert [p.round_ms for p in with_call] == pytest.approx([p.round_ms + 1.5 for p in predictions])
    best = recommended_k(predictions)
    assert best is not None and best.speedup == max(p.speedup for p in predictions)
    assert best.k == 2  # 1.8 tokens in 14.2 ms, 2.4 in 17.4, 2.7 in 20.6: k 2 is the fastest


def test_a_runs_drafting_time_taken_apart_with_the_call_measured_alone() -> None:
    """Rounds that drafted 4 tokens in 10 ms each, with a step timed alone at 2 ms: 8 ms of
    steps and 2 ms a round besides; a step timed alone slower than the rounds' whole drafting
    allows is capped at it (nothing besides); where the rounds drafted nothing, the times
    measured alone."""
    ones = [1.0] * 4
    rounds = RoundsMeasured(
        acceptance_per_position=ones,
        drafted_share=ones,
        kept_share=ones,
        host_ms=0.0,
        draft_round_ms=10.0,
        mean_drafted=4.0,
    )
    assert rounds.draft_costs(draft_step_ms=2.0, draft_call_ms=0.5) == pytest.approx((2.0, 2.0))
    assert rounds.draft_costs(draft_step_ms=9.0, draft_call_ms=0.5) == pytest.approx((2.5, 0.0))
    idle = RoundsMeasured(
        acceptance_per_position=[], drafted_share=[], kept_share=[], host_ms=0.0, draft_round_ms=0.0, mean_drafted=0.0
    )
    assert idle.draft_costs(draft_step_ms=9.0, draft_call_ms=2.0) == (9.0, 2.0)
    # a round of k drafts then costs the fixed part once and k steps (a prediction's draft part)
    verify = {rows: 10.0 for rows in range(1, 10)}
    by_k = {p.k: p for p in rounds.predict(verify, 2.0, 10.0, 8, draft_call_ms=0.5)}
    assert by_k[4].round_ms == pytest.approx(2.0 + 4 * 2.0 + 10.0)
    assert by_k[1].round_ms == pytest.approx(2.0 + 1 * 2.0 + 10.0)


def shares(round_ms: float, drafted: float) -> RoundsMeasured:
    """Rounds that kept every drafted token, drafting `drafted` a round in `round_ms` ms."""
    ones = [1.0] * 8
    return RoundsMeasured(
        acceptance_per_position=ones,
        drafted_share=ones,
        kept_share=ones,
        host_ms=0.0,
        draft_round_ms=round_ms,
        mean_drafted=drafted,
    )


def test_rounds_of_two_draft_lengths_draw_the_drafters_cost_as_rounds_paid_it() -> None:
    """Rounds drafting 8 tokens in 12 ms and rounds drafting 1 in 3 ms: 9/7 ms a drafted token
    and 3 - 9/7 ms a round, whatever was timed alone; so a predicted round of 1 draft costs what
    the short rounds paid, where the step timed alone (0.5 ms) would have charged it 12 - 8 x 0.5
    ms. Drafts less than a token apart, or a line that falls, draw none."""
    line = shares(12.0, 8.0).with_short_rounds(shares(3.0, 1.0))
    step_ms, call_ms = 9 / 7, 3 - 9 / 7
    assert line.draft_costs(draft_step_ms=0.5, draft_call_ms=0.1) == pytest.approx((step_ms, call_ms))
    assert line.scaled(2.0).draft_costs(draft_step_ms=0.5) == pytest.approx((2 * step_ms, 2 * call_ms))
    verify = {rows: 10.0 for rows in range(1, 10)}
    by_k = {p.k: p for p in line.predict(verify, 0.5, 10.0, 8, draft_call_ms=0.1)}
    assert by_k[1].round_ms == pytest.approx(3.0 + 10.0) and by_k[8].round_ms == pytest.approx(12.0 + 10.0)
    alone = {p.k: p for p in shares(12.0, 8.0).predict(verify, 0.5, 10.0, 8, draft_call_ms=0.1)}
    assert alone[1].round_ms == pytest.approx(12.0 - 8 * 0.5 + 0.5 + 10.0)
    assert shares(12.0, 8.0).with_short_rounds(shares(11.0, 7.5)).draft_line_ms is None
    assert shares(2.0, 8.0).with_short_rounds(shares(3.0, 1.0)).draft_line_ms is None


@pytest.mark.parametrize("drafter", ["near", "far"])
def test_a_drafters_line_from_its_rounds_is_its_models_cost(drafter: str) -> None:
    """On the scripted clock a drafter's forward of one row costs a fifth of the target's step and
    row (2 + 0.2 ms): the line through its rounds at k 8 and at 1 (`measure_drafter`) finds that
    per drafted token, and little besides per round."""
    backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("near", "far"))
    prompt = backend.encode(CODE_PROMPT, raw=True)
    measured = measure_drafter(scripted_engine(backend), prompt, SpecSettings(), drafter, k=8, max_tokens=96)
    assert measured.draft_line_ms is not None
    step_ms, call_ms = measured.draft_line_ms
    assert step_ms == pytest.approx(2.2, rel=0.02) and 0 <= call_ms < 0.5
    assert (
        measured.acceptance_per_position
        == measure_rounds(  # acceptance: from the rounds at k 8
            scripted_engine(backend), prompt, SpecSettings(), drafter, k=8, max_tokens=96
        ).acceptance_per_position
    )


def test_a_drafters_cost_in_rounds_is_its_lines_slope_and_the_costs_price_a_token_by_it() -> None:
    """`measure_drafting` (the playground's "Measure round costs"): a model drafter's time per
    drafted token in real rounds (2.2 ms on the scripted clock); prompt lookup, whose drafting
    takes no time there, draws no line and keeps the step timed alone; the route none, no drafter,
    is passed over."""
    backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("near", "lookup"))
    engine = scripted_engine(backend)
    prompt = backend.encode(CODE_PROMPT, raw=True)
    costs = measure_costs(engine, prompt, GREEDY, LOSSLESS, max_rows=9, repeats=1, pipeline=False)
    settings = SpecSettings()
    in_rounds = measure_drafting(
        engine,
        prompt,
        settings,
        ["near", "lookup", "none"],
        k=8,
        max_tokens=48,
        target_step_ms=costs.target_step_ms.ms,
        pipeline=False,
    )
    assert in_rounds.keys() == {"near"} and in_rounds["near"] == pytest.approx(2.2, rel=0.02)
    measured = replace(costs, draft_step_in_rounds_ms={"near": 3.0})
    assert measured.step_for_rounds_ms("near") == 3.0
    assert measured.step_for_rounds_ms("lookup") == costs.draft_step_ms["lookup"].ms == 0


def test_a_dip_in_the_verify_curve_is_pooled_with_its_neighbours() -> None:
    # more rows never cost less: 14 at 3 rows after 16 at 2 is noise, pooled to their mean
    assert monotone({1: 10.0, 2: 16.0, 3: 14.0, 4: 17.0}) == {1: 10.0, 2: 15.0, 3: 15.0, 4: 17.0}
    assert monotone({1: 10.0, 2: 20.0, 3: 12.0, 4: 13.0}) == {1: 10.0, 2: 15.0, 3: 15.0, 4: 15.0}
    assert monotone({n: 10.0 + n for n in range(1, 6)}) == {n: 10.0 + n for n in range(1, 6)}
    noisy = predict_by_k([0.9, 0.8], {1: 10.0, 2: 16.0, 3: 14.0}, 1.0, 10.0, k_max=2)
    pooled = predict_by_k([0.9, 0.8], {1: 10.0, 2: 15.0, 3: 15.0}, 1.0, 10.0, k_max=2)
    assert [p.speedup for p in noisy] == pytest.approx([p.speedup for p in pooled])


def test_rounds_that_draft_less_cost_less_and_commit_less() -> None:
    # prompt lookup: half the rounds find 2 tokens to copy, half find none
    verify = {1: 10.0, 2: 12.0, 3: 14.0}
    one, two = predict_by_k([0.4, 0.3], verify, 1.0, 10.0, k_max=2, drafted_share=[0.5, 0.5])
    # k = 1: half verify 1 row, half draft 1 and verify 2; 1 + 0.4 tokens
    assert one.round_ms == pytest.approx(0.5 * 10.0 + 0.5 * (1.0 + 12.0))
    assert one.speedup == pytest.approx(1.4 * 10.0 / one.round_ms)
    # k = 2: half verify 1 row, half draft 2 and verify 3; 1 + 0.4 + 0.3 tokens
    assert two.round_ms == pytest.approx(0.5 * 10.0 + 0.5 * (2.0 + 14.0))
    assert two.speedup == pytest.approx(1.7 * 10.0 / two.round_ms)


def test_with_one_alpha_and_a_verify_that_costs_a_step_it_is_leviathans_formula() -> None:
    alpha, c, step = 0.75, 0.1, 20.0
    verify = dict.fromkeys(range(1, 10), step)  # the formula's verify pass: one target step, any rows
    predictions = predict_by_k([alpha**i for i in range(1, 9)], verify, c * step, step, k_max=8)
    for p in predictions:
        assert p.speedup == pytest.approx(predicted_speedup(alpha, p.k, c))


def test_break_even_acceptance_at_its_edges() -> None:
    assert break_even_alpha(4, 1.0) == 0.0  # a round as cheap as a step: anything pays
    assert break_even_alpha(4, 5.0) == 1.0  # a round of 5 steps can commit at most 5 tokens
    assert 0 < break_even_alpha(4, 1.5) < break_even_alpha(4, 3.0) < 1


@pytest.mark.parametrize("drafter", ["near", "lookup"])
def test_the_prediction_matches_the_engines_own_run_at_every_k(drafter: str) -> None:
    """A fixed-k run on the scripted clock: its tokens/s over the target-only run's is what its own
    per-position acceptance and the measured costs predict (up to its last, shorter rounds)."""
    cost = Cost(step_ms=10.0, row_ms=1.0)
    backend = scripted_backend(cost, drafters=("near", "lookup"))  # near times the verify pass at every row
    prompt = backend.encode(CODE_PROMPT, raw=True)
    costs = measure_costs(scripted_engine(backend), prompt, GREEDY, LOSSLESS, max_rows=9, repeats=2)
    target = done(run(backend, CODE_PROMPT, mode="target", max_tokens=200)).metrics["tokens_per_s"]
    verify = {rows: t.ms for rows, t in costs.verify_ms.items()}
    for k in (1, 2, 4, 8):
        events = run(backend, CODE_PROMPT, k=k, route=drafter, max_tokens=200)
        metrics = done(events).metrics
        if drafter == "near":  # every round drafts k, but those near the end, cut to fit max_tokens
            assert every(len(r.positions) == k for r in rounds(events) if r.token_index + k < 200)
        else:  # prompt lookup drafts what it finds to copy: some rounds less, some nothing
            assert {len(r.positions) for r in rounds(events)} - {k}
        predictions = RoundsMeasured.of(metrics).predict(
            verify, costs.draft_step_ms[drafter].ms, costs.target_step_ms.ms, k
        )
        assert predictions[-1].k == k
        assert predictions[-1].speedup == pytest.approx(metrics["tokens_per_s"] / target, rel=0.03), k


@pytest.mark.parametrize("width", [2, 3])
def test_a_trees_prediction_matches_the_engines_own_tree_run(width: int) -> None:
    """On the scripted clock, a tree run's speedup over target-only is what its own acceptance by
    depth, its drafting and host time and the verify curve at its rows predict, and so is its
    ratio to the chain of as many nodes."""
    cost = Cost(step_ms=10.0, row_ms=1.0)
    backend = scripted_backend(cost, drafters=("near",))
    prompt = backend.encode(CODE_PROMPT, raw=True)
    costs = measure_costs(scripted_engine(backend), prompt, GREEDY, LOSSLESS, max_rows=9, repeats=2)
    verify, step = {rows: t.ms for rows, t in costs.verify_ms.items()}, costs.target_step_ms.ms
    target = done(run(backend, CODE_PROMPT, mode="target", max_tokens=200)).metrics["tokens_per_s"]
    for nodes in (4, 8):
        chain_run = done(run(backend, CODE_PROMPT, k=nodes, route="near", max_tokens=200)).metrics
        tree_events = run(backend, CODE_PROMPT, k=nodes, route="near", width=width, tree_nodes=nodes, max_tokens=200)
        tree_run = done(tree_events).metrics
        assert tree_run["num_tree_rounds"] == len(rounds(tree_events))
        chain = RoundsMeasured.of(chain_run).predict(verify, costs.draft_step_ms["near"].ms, step, nodes)[-1]
        tree = RoundsMeasured.of(tree_run).predict_tree(chain, width, verify, step)
        assert tree is not None and (tree.nodes, tree.depth) == (nodes, -(-nodes // width))
        assert tree.speedup == pytest.approx(tree_run["tokens_per_s"] / target, rel=0.03), nodes
        measured = tree_run["tokens_per_s"] / chain_run["tokens_per_s"]
        assert tree.vs_chain == pytest.approx(measured, rel=0.05), nodes


def test_a_drafters_rounds_read_alike_from_metrics_and_from_the_rounds() -> None:
    backend = scripted_backend(drafters=("near", "lookup"))
    for drafter in ("near", "lookup"):
        events = run(backend, CODE_PROMPT, k=8, route=drafter, max_tokens=80)
        whole = [r for r in rounds(events) if r.token_index + 8 <= 80]  # none cut to end at max_tokens
        measured = RoundsMeasured.of_rounds(whole)
        drafted = [sum(len(r.positions) > i for r in whole) / len(whole) for i in range(8)]
        kept = [sum(r.num_accepted > i for r in whole) / len(whole) for i in range(8)]
        assert measured.drafted_share[:8] + [0.0] * (8 - len(measured.drafted_share)) == pytest.approx(drafted)
        assert measured.kept_share[:8] + [0.0] * (8 - len(measured.kept_share)) == pytest.approx(kept)
        if drafter == "near":  # a model drafter drafts every token asked of it
            assert measured.drafted_share == [1.0] * 8
        else:  # prompt lookup drafts what it finds to copy; asked for 8, what it never reached counts 0
            assert min(measured.drafted_share) < 1.0
            asked = measured.asked(8).drafted_share
            assert len(asked) == 8 and asked[: len(measured.drafted_share)] == measured.drafted_share


def test_prompt_lookup_alone_times_every_row_count_and_recommends_a_k() -> None:
    """The verify pass is timed on a draft given to the target, not drafted: prompt lookup, which
    drafts only what it finds, still gets the whole curve, and a k."""
    backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("lookup",))
    engine = scripted_engine(backend)
    prompt = backend.encode(CODE_PROMPT, raw=True)
    costs = measure_costs(engine, prompt, GREEDY, LOSSLESS, max_rows=12, repeats=3)
    assert list(costs.verify_ms) == list(range(1, 13))
    assert every(t.ms == pytest.approx(10.0 + rows) for rows, t in costs.verify_ms.items())
    assert costs.draft_step_ms["lookup"].ms == 0 and len(costs.passes) == 3
    rounds = measure_rounds(engine, prompt, SpecSettings(), "lookup", k=8, max_tokens=120, ignore_eos=True)
    prediction = predict_drafter(costs, "lookup", rounds, k_max=8)
    assert [p.k for p in prediction.by_k] == list(range(1, 9))
    assert prediction.best is not None and prediction.best.speedup > 1
    assert disturbance(costs, [prediction]) is None  # the scripted clock is exact: nothing moved


def test_a_busy_machine_is_said_to_be_too_noisy_to_choose_k_and_a_quiet_one_is_not() -> None:
    for jitter, disturbed in ((0.0, False), (0.02, False), (2.0, True)):
        backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("lookup",))
        engine = SpecEngine(backend, clock=LoadedClock(backend.clock, jitter=jitter))
        prompt = backend.encode(CODE_PROMPT, raw=True)
        costs = measure_costs(engine, prompt, GREEDY, LOSSLESS, max_rows=9, repeats=REPEATS)
        rounds = measure_rounds(engine, prompt, SpecSettings(), "lookup", k=8, max_tokens=120, ignore_eos=True)
        reason = disturbance(costs, [predict_drafter(costs, "lookup", rounds, k_max=8)])
        assert (reason is not None) == disturbed, (jitter, reason)
    assert reason is not None and "busy" in reason


def test_a_slow_phase_of_the_machine_moves_the_target_step_and_the_rest_alike() -> None:
    """A phase three times slower while part of the passes are timed (another process loading the
    machine): each pass is taken over the target steps beside it, so the verify curve and each
    drafter's step in target steps, and the k recommended, are those of a quiet machine."""
    backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("near",))
    prompt = backend.encode(CODE_PROMPT, raw=True)
    quiet = measure_costs(scripted_engine(backend), prompt, GREEDY, LOSSLESS, max_rows=9, repeats=5)
    span_s = backend.clock()  # the whole measurement, in the models' own time
    loaded_backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("near",))
    # slow through the middle half: the target steps timed first and last are all quick ones
    clock = LoadedClock(loaded_backend.clock, slow_from_s=0.25 * span_s, slow_until_s=0.75 * span_s)
    loaded = measure_costs(SpecEngine(loaded_backend, clock=clock), prompt, GREEDY, LOSSLESS, max_rows=9, repeats=5)
    for rows, t in loaded.verify_ms.items():
        in_steps = t.ms / loaded.target_step_ms.ms
        assert in_steps == pytest.approx(quiet.verify_ms[rows].ms / quiet.target_step_ms.ms, rel=0.02), rows
    assert loaded.cost_ratio("near") == pytest.approx(quiet.cost_ratio("near"), rel=0.02)
