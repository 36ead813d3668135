"""The bench report's arithmetic on recorded results, and a quick sweep on tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.bench.k_advice import ADVICE_K_MAX, advice_rows, k_advice, k_advice_markdown
from specplay.bench.report import build_rows, markdown, router_report, to_csv
from specplay.bench.stats import coefficient_of_variation, median, needs_more_repeats
from specplay.bench.sweep import CONTROL, BenchConfig, Measurement, load_prompts, plan
from specplay.cli import main
from specplay.engine.costs import RoundCosts, Timing
from specplay.engine.settings import SpecSettings
from specplay.engine.speedup import predict_by_k, predicted_speedup
from specplay.errors import ConfigError
from tests.support.checks import every
from tests.support.tiny_models import TinyModels


def test_statistics() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([]) is None
    assert coefficient_of_variation([10.0, 10.0, 10.0]) == 0.0
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert not needs_more_repeats([[100.0, 101.0, 99.0]])  # CV 1%
    assert needs_more_repeats([[100.0, 101.0, 99.0], [90.0, 100.0, 110.0]])  # one cell at 10%


def _m(config: str, tokens_per_s: float, **spec: object) -> Measurement:
    fields = {"route": None, "num_tokens": 32, "e2e_ms": 100.0} | spec
    return Measurement(config, "code", "p", 0.0, 0, 0, tokens_per_s=tokens_per_s, **fields)  # type: ignore[arg-type]


def test_rows_compute_speedup_and_prediction_from_recorded_results() -> None:
    configs = [
        BenchConfig("target-only", "baseline", "target"),
        BenchConfig("draft-only d", "baseline", "draft", settings=SpecSettings(route="d")),
    ]
    configs.append(BenchConfig("k=4", "k"))
    spec = {"route": "d", "num_spec_steps": 16, "num_draft_tokens": 64, "num_accepted_draft_tokens": 15}
    # 30 judged positions per request; 64 drafted tokens in 64 ms against a 9 ms target step (the
    # target-only requests' median mean step, not their tokens/s: one yardstick with the playground)
    spec |= {"num_judged_draft_tokens": 30, "draft_ms": 64.0, "verify_ms": 160.0, "overhead_ms": 16.0}
    spec |= {"draft_lengths": [4] * 16, "drafted_per_position": [16, 8, 8, 8], "accepted_per_position": [6, 4, 3, 2]}
    measurements = [_m("target-only", t, mean_step_ms=ms) for t, ms in ((100.0, 10.0), (120.0, 8.0), (110.0, 9.5))]
    measurements += [_m("draft-only d", 1000.0), _m("k=4", 150.0, **spec), _m("k=4", 170.0, **spec)]
    rows = {r.config: r for r in build_rows(configs, measurements)}
    target, spec_row = rows["target-only"], rows["k=4"]
    assert target.tokens_per_s == 110.0 and target.speedup == 1.0
    assert spec_row.tokens_per_s == 160.0 and spec_row.speedup == pytest.approx(160 / 110)
    assert spec_row.draft_acceptance_rate == pytest.approx(30 / 128)
    assert spec_row.mean_acceptance_length == pytest.approx(1 + 30 / 32) and spec_row.rounds_per_request == 16
    assert spec_row.acceptance_per_position == [0.375, 0.5, 0.375, 0.25]
    # the playground's definitions: alpha = accepted / judged, c = drafted token time / target step
    assert spec_row.alpha == pytest.approx(0.5) and spec_row.cost_ratio == pytest.approx(1.0 / 9.5)
    assert spec_row.predicted_speedup == pytest.approx(predicted_speedup(0.5, 4, 1 / 9.5))
    # each round verifies in 10 ms and spends 1 ms on the host: 10 / 9.5 and 1 / 9.5 target steps
    c = 1 / 9.5
    costed = spec_row.predicted_speedup * (4 * c + 1) / (4 * c + 10 * c + c)
    assert spec_row.costed_speedup == pytest.approx(costed)


def test_which_k_sets_the_sweeps_best_k_beside_the_recommended_one() -> None:
    configs = [
        BenchConfig("target-only", "baseline", "target"),
        BenchConfig("k=2", "k", settings=SpecSettings(k=2)),
        BenchConfig("k=4", "k", settings=SpecSettings(k=4)),
    ]
    common = {"route": "d", "num_spec_steps": 10, "overhead_ms": 20.0}
    deep = common | {"drafted_per_position": [10, 10, 10, 10], "accepted_per_position": [9, 8, 5, 1]}
    measurements = [_m("target-only", 100.0, mean_step_ms=10.0), _m("k=2", 170.0, **common), _m("k=4", 150.0, **deep)]
    rows = build_rows(configs, measurements)
    verify = {n: Timing(10.0 + n, 0.0) for n in range(1, 6)}
    costs = RoundCosts(Timing(10.0, 0.0), verify, {"d": Timing(1.0, 0.0)})
    (advice,) = k_advice(configs, rows, measurements, {0.0: costs})
    # measured: k=2 at 1.7x beats k=4 at 1.5x; predicted from k=4's acceptance, the costs, 2 ms host a round
    assert (advice.measured_best_k, advice.measured_best_speedup) == (2, pytest.approx(1.7))
    expected = predict_by_k([0.9, 0.8, 0.5, 0.1], {n: 10.0 + n for n in range(1, 6)}, 1.0, 10.0, 4, host_ms=2.0)
    best = max(expected, key=lambda p: p.speedup)
    assert (advice.recommended_k, advice.predicted_speedup) == (best.k, pytest.approx(best.speedup))
    assert advice.measured_at_recommended == {2: pytest.approx(1.7), 4: pytest.approx(1.5)}.get(best.k)
    assert advice.route == "d" and "## Which k" in "\n".join(k_advice_markdown([advice]))


def test_which_k_prices_a_drafted_token_by_the_line_through_the_sweeps_rounds() -> None:
    """Rounds at k 1 spend 3 ms drafting and at k 4 9 ms: 2 ms a drafted token and 1 ms a round,
    though the step timed alone said 1 ms. The prediction takes the line; without the k 1 row it
    can only split k 4's drafting with the step timed alone (1 ms a token, 5 ms a round)."""
    configs = [BenchConfig("target-only", "baseline", "target")]
    configs += [BenchConfig(f"k={k}", "k", settings=SpecSettings(k=k)) for k in (1, 4)]
    common = {"route": "d", "num_spec_steps": 10, "overhead_ms": 20.0}
    short = common | {"num_draft_tokens": 10, "draft_ms": 30.0, "drafted_per_position": [10]}
    deep = common | {"num_draft_tokens": 40, "draft_ms": 90.0, "drafted_per_position": [10, 10, 10, 10]}
    measurements = [_m("target-only", 100.0, mean_step_ms=10.0)]
    measurements += [_m("k=1", 140.0, **short, accepted_per_position=[9])]
    measurements += [_m("k=4", 150.0, **deep, accepted_per_position=[9, 8, 5, 1])]
    rows = build_rows(configs, measurements)
    verify = {n: Timing(10.0 + n, 0.0) for n in range(1, 6)}
    costs = RoundCosts(Timing(10.0, 0.0), verify, {"d": Timing(1.0, 0.0)})
    kept, curve = [0.9, 0.8, 0.5, 0.1], {n: 10.0 + n for n in range(1, 6)}

    def best(step_ms: float, call_ms: float) -> float:
        return max(p.speedup for p in predict_by_k(kept, curve, step_ms, 10.0, 4, host_ms=2.0, draft_call_ms=call_ms))

    (advice,) = k_advice(configs, rows, measurements, {0.0: costs})
    assert advice.predicted_speedup == pytest.approx(best(2.0, 1.0))
    no_short = [m for m in measurements if m.config != "k=1"]
    (alone,) = k_advice(configs, build_rows(configs, no_short), no_short, {0.0: costs})
    assert alone.predicted_speedup == pytest.approx(best(1.0, 5.0)) != pytest.approx(best(2.0, 1.0))
    # a k 1 row whose requests ran no round (a drafter that never drafted) draws no line either
    idle = [*no_short, _m("k=1", 100.0, route="d")]
    (idle_advice,) = k_advice(configs, build_rows(configs, idle), idle, {0.0: costs})
    assert idle_advice.predicted_speedup == pytest.approx(best(1.0, 5.0))


def test_which_k_reaches_past_the_longest_k_swept_and_says_where_it_is_capped_or_pays_nowhere() -> None:
    """Swept at k 2 and 4, with the verify pass timed to k 8 (advice_rows): a drafter kept at
    every position is predicted fastest at k 8, which the sweep did not run and where the curve
    has not turned (capped); one whose rounds cost more than they keep gets the route none."""
    configs = [BenchConfig("target-only", "baseline", "target")]
    configs += [BenchConfig(f"k={k}", "k", settings=SpecSettings(k=k)) for k in (2, 4)]
    assert advice_rows(configs) == ADVICE_K_MAX + 1 == 9
    assert advice_rows(configs[:1]) == 0  # no fixed-k sweep: no advice, no costs
    common = {"route": "d", "num_spec_steps": 10, "overhead_ms": 20.0}
    kept_all = {"drafted_per_position": [10] * 4, "accepted_per_position": [10] * 4}
    measurements = [_m("target-only", 100.0, mean_step_ms=10.0)]
    measurements += [_m("k=2", 150.0, **common, drafted_per_position=[10] * 2, accepted_per_position=[10] * 2)]
    measurements += [_m("k=4", 200.0, **common, **kept_all)]
    rows = build_rows(configs, measurements)
    verify = {n: Timing(10.0 + 0.1 * n, 0.0) for n in range(1, advice_rows(configs) + 1)}
    cheap = RoundCosts(Timing(10.0, 0.0), verify, {"d": Timing(0.1, 0.0)})
    (advice,) = k_advice(configs, rows, measurements, {0.0: cheap})
    assert (advice.longest_swept_k, advice.longest_predicted_k) == (4, 8)
    assert advice.recommended_k == advice.best_k == 8 and advice.capped and advice.recommended_route == "d"
    assert advice.measured_at_recommended is None
    text = "\n".join(k_advice_markdown([advice]))
    assert "| 8 (capped) |" in text and "| not swept |" in text
    assert "Capped (code at temperature 0): the prediction still rises at k 8" in text
    # a drafted token dearer than a target step, and rounds that keep little: no k pays
    dear = RoundCosts(Timing(10.0, 0.0), verify, {"d": Timing(30.0, 0.0)})
    few = [_m("target-only", 100.0, mean_step_ms=10.0)]
    few += [_m(f"k={k}", 40.0, **common, drafted_per_position=[10] * k, accepted_per_position=[1] * k) for k in (2, 4)]
    (none,) = k_advice(configs, build_rows(configs, few), few, {0.0: dear})
    assert none.recommended_k is None and none.recommended_route == "none" and none.best_k is not None
    assert none.predicted_speedup is not None and none.predicted_speedup < 1 and not none.capped
    assert f"| route none (k {none.best_k} is fastest, and slower than the target) |" in "\n".join(
        k_advice_markdown([none])
    )


def test_a_drafter_that_never_drafted_has_no_acceptance_rate() -> None:
    """Prompt lookup on a prompt whose n-grams never recur: every round is a plain target step."""
    configs = [BenchConfig("target-only", "baseline", "target"), BenchConfig("k=4", "k")]
    spec = {"route": "lookup", "num_spec_steps": 32, "num_draft_tokens": 0, "num_accepted_draft_tokens": 0}
    spec |= {"num_judged_draft_tokens": 0, "draft_ms": 3.0, "verify_ms": 320.0, "overhead_ms": 1.0}
    spec |= {"draft_lengths": [0] * 32, "drafted_per_position": [0, 0], "accepted_per_position": [0, 0]}
    rows = {r.config: r for r in build_rows(configs, [_m("target-only", 100.0), _m("k=4", 99.0, **spec)])}
    row = rows["k=4"]
    assert row.draft_acceptance_rate is None and row.alpha is None and row.acceptance_per_position == []
    assert row.mean_acceptance_length == 1.0 and row.speedup == pytest.approx(0.99)
    assert "k=4" in markdown(list(rows.values()), {"command": "specplay bench"})


def test_rows_sum_the_rejection_ranks_and_give_the_second_branch_share() -> None:
    configs = [BenchConfig("target-only", "baseline", "target"), BenchConfig("k=4", "k")]
    spec = {"route": "d", "num_spec_steps": 4, "num_draft_tokens": 16, "num_accepted_draft_tokens": 8}
    spec |= {"num_judged_draft_tokens": 10, "draft_ms": 4.0, "verify_ms": 40.0, "overhead_ms": 1.0}
    first = {"1": 0, "2": 2, "3": 1, "4": 0, "other": 1}
    second = {"1": 1, "2": 0, "3": 0, "4": 1, "other": 2}
    measurements = [_m("target-only", 100.0, mean_step_ms=10.0), _m("k=4", 120.0, **spec)]
    measurements += [_m("k=4", 110.0, **spec, rejection_rank_histogram=first)]
    measurements += [_m("k=4", 115.0, **spec, rejection_rank_histogram=second)]  # one request without: unknown
    rows = {r.config: r for r in build_rows(configs, measurements)}
    row = rows["k=4"]
    assert row.rejection_rank_histogram == {"1": 1, "2": 2, "3": 1, "4": 1, "other": 3}
    assert row.second_branch_share == pytest.approx(3 / 8) and rows["target-only"].second_branch_share is None
    report = markdown(list(rows.values()), {"command": "specplay bench"})
    assert "| second branch |" in report.splitlines()[-4] and report.splitlines()[-1].endswith("| 38% |")
    assert "second_branch_share" in to_csv(list(rows.values())).splitlines()[0]


def test_plan_and_prompts() -> None:
    labels = [c.label for c in plan(["a", "b"], quick=False)]
    assert labels[:3] == ["target-only", "draft-only a", "draft-only b"]
    assert {"k=2", "k=4", "k=6", "k=8", "acceptance-rate", "accepted-length", "confidence", "cost", "D=1"} <= set(
        labels
    )
    assert {"route a", "route b", "route none", "route auto", "route adaptive"} <= set(labels)
    assert "cost" in [c.label for c in plan(["a", "b"], quick=True)]
    # --sweeps: target-only always; the A/A control (a Spec-Bench file's) last
    routes = [c.label for c in plan(["a", "b"], quick=True, sweeps=("route",), control=True)]
    assert routes == ["target-only", *(f"route {r}" for r in ("a", "b", "none", "auto", "adaptive")), CONTROL]
    assert [c.label for c in plan(["a", "b"], quick=True, sweeps=("draft-only",))] == [
        "target-only",
        "draft-only a",
        "draft-only b",
    ]
    assert "router check" in [c.label for c in plan(["a", "b"], False, counterfactual=True, sweeps=("router",))]
    prompts = load_prompts(None, 2).prompts
    assert [p.category for p in prompts] == ["code", "code", "prose", "prose", "mixed", "mixed", "editing", "editing"]
    with pytest.raises(ConfigError, match="cannot be read"):
        load_prompts(Path("/nonexistent/prompts.jsonl"), 1)


def test_quick_bench_writes_every_file(tiny: TinyModels, tmp_path: Path) -> None:
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}", "--draft", f"far={tiny.far}"]
    out = tmp_path / "report"
    # The library's first code and prose prompts (the others' categories add time, not coverage).
    prompts = tmp_path / "prompts.jsonl"
    first = [next(p for p in load_prompts(None, 1).prompts if p.category == c) for c in ("code", "prose")]
    prompts.write_text("".join(json.dumps({"category": p.category, "text": p.text}) + "\n" for p in first))
    flags = ["--quick", "--out", str(out), "--max-tokens", "12", "--compare-mlx-lm", "--prompts", str(prompts)]
    assert main(["bench", *models, *flags]) == 0
    names = {"report.md", "results.json", "results.csv", "speedup_vs_k.png", "acceptance_vs_tv.png"}
    assert names | {"acceptance_by_position.png"} <= {p.name for p in out.iterdir()}
    results = json.loads((out / "results.json").read_text())
    rows = {(r["category"], r["config"]) for r in results["rows"]}
    assert {("code", "target-only"), ("prose", "k=4"), ("code", "route far"), ("prose", "D=1")} <= rows
    assert len({m["repeat"] for m in results["measurements"]}) in (3, 5)
    compared = {r["config"] for r in results["rows"] if r["vs_mlx_lm"] is not None}
    assert compared == {"target-only", "k=2", "k=4"}
    assert "## code, temperature 0" in (out / "report.md").read_text()
    k_rows = [r for r in results["rows"] if r["config"] == "k=4"]
    assert every(r["rejection_rank_histogram"] is not None for r in k_rows)
    # The router check: each prompt's routed drafter against the one that accepted most.
    router = results["router"]
    # Neither drafter is named after a class, so the route map sends both classes to the first.
    assert {(c["category"], c["routed"], c["labelled"]) for c in router["cases"]} == {
        ("code", "near", "near"),
        ("prose", "near", "near"),
    }
    assert every(set(c["mean_acceptance_length"]) == {"near", "far"} for c in router["cases"])
    assert router["accuracy_on_labels"] == 1.0
    assert 0 <= router["accuracy_by_acceptance"] <= 1
    assert not any(r["config"] == "router check" for r in results["rows"])  # an accuracy, not a speed row
    assert "## Router check" in (out / "report.md").read_text()
    # Which k: per category, the sweep's best k beside the recommended one
    advice = {a["category"]: a for a in results["k_advice"]}
    assert set(advice) == {"code", "prose"} and every(a["measured_best_k"] in (2, 4) for a in advice.values())
    # predicted past the longest k swept (4), to the policies' bound
    assert every(a["longest_predicted_k"] == 8 and 1 <= a["best_k"] <= 8 for a in advice.values())
    assert every((a["recommended_k"] is None) == (a["recommended_route"] == "none") for a in advice.values())
    assert every(a["capped"] == (a["best_k"] == 8) for a in advice.values())
    report = (out / "report.md").read_text()
    assert "## Which k" in report
    # the report names the models it ran
    assert f"- model set: target {tiny.target.name}; drafters near, far" in report
    # Which route: each drafter pinned, auto and adaptive, per category
    routes = {r["category"]: r for r in results["routes"]}
    assert set(routes) == {"code", "prose"}
    assert every(set(r["tokens_per_s"]) == {"near", "far", "none", "auto", "adaptive"} for r in routes.values())
    assert every(r["best_single"] in ("near", "far", "none") for r in routes.values())
    assert every(r["over_best_single"]["adaptive"] > 0 for r in routes.values())
    assert "## Which route" in (out / "report.md").read_text()


def test_router_report_counts_accuracy_on_labels_and_by_acceptance() -> None:
    def check(prompt: str, category: str, routed: str, lengths: dict[str, float], repeat: int = 0) -> Measurement:
        return Measurement(
            "router check", category, prompt, 0.0, repeat, repeat, routed, 10, 1.0, None, counterfactual=lengths
        )

    measurements = [
        check("a", "code", "code-drafter", {"code-drafter": 3.0, "prose-drafter": 2.0}),
        check("a", "code", "code-drafter", {"code-drafter": 2.0, "prose-drafter": 2.0}, repeat=1),  # mean 2.5 vs 2
        check(
            "b", "prose", "code-drafter", {"code-drafter": 2.5, "prose-drafter": 1.5}
        ),  # label wrong, acceptance right
        check(
            "c", "prose", "prose-drafter", {"code-drafter": 2.0, "prose-drafter": 1.0}
        ),  # label right, acceptance wrong
        check("d", "other", "prose-drafter", {"code-drafter": 1.0, "prose-drafter": 1.0}),  # a tie; no label
    ]
    report = router_report(measurements, {"code": "code-drafter", "prose": "prose-drafter"})
    assert report is not None
    assert report["accuracy_on_labels"] == pytest.approx(2 / 3)
    assert report["accuracy_by_acceptance"] == pytest.approx(3 / 4)
    assert report["mean_route_regret"] == pytest.approx((0 + 0 + 1.0 + 0) / 4)
    assert router_report(measurements[:0], {}) is None
