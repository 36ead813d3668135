"""`specplay costs` end to end on the shipped demo models: what it measures, the names its JSON
gives them (other tools read them), and acceptance read from saved sessions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.backends.mlx import blas
from specplay.cli import main
from specplay.cli.costs import _lines, _report
from specplay.engine.costs import measure_costs, measure_rounds
from specplay.engine.layout import is_chain
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.speedup import predict_by_k
from specplay.store import load_session
from tests.support.checks import every
from tests.support.costs_clock import LoadedClock
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend

PROMPT = "def read_lines(path):\n    "
PLAYGROUND_SESSION = Path(__file__).resolve().parents[1] / "data" / "saved_sessions" / "playground-live-change.jsonl"
"""A playground session on the demo models: rounds routed to base (code) and prose."""
QUICK = ["--target", "demo", "--prompt", PROMPT, "--repeats", "1", "--max-rows", "9", "--json"]


def _costs(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    capsys.readouterr()
    assert main(["costs", *QUICK, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_costs_json_names_and_a_recommendation_per_drafter(capsys: pytest.CaptureFixture[str]) -> None:
    report = _costs(capsys, "--acceptance-tokens", "24")
    assert report["target_step_ms"] > 0 and report["includes_http"] is False
    assert report["blas_threads"] == blas.THREADS_CHOSEN  # the count every time here was measured at
    assert [row["rows"] for row in report["verify_ms"]] == list(range(1, 10))
    assert every(row["ms"] > 0 and row["spread_ms"] >= 0 for row in report["verify_ms"])
    assert set(report["drafters"]) == {"base", "prose"}
    verify = {row["rows"]: row["ms"] for row in report["verify_ms"]}
    for name, drafter in report["drafters"].items():
        assert drafter["draft_step_ms"] > 0 and drafter["c"] == pytest.approx(
            drafter["draft_step_ms"] / report["target_step_ms"]
        )
        acceptance = drafter["acceptance_per_position"]
        assert 1 <= len(acceptance) <= 8 and every(0 <= a <= 1 for a in acceptance)
        by_k = drafter["predicted_speedup_by_k"]
        assert [p["k"] for p in by_k] == list(range(1, 9))
        assert set(by_k[0]) == {"k", "expected_tokens", "round_ms", "speedup", "break_even_acceptance"}
        # the numbers are speedup.py's from the measured numbers, and the recommendation is their best
        host_ms = drafter["host_ms_per_round"]
        assert host_ms >= 0
        assert drafter["draft_costs_from"] == "rounds"  # its rounds at k 8 and at 1 drew its cost
        kept, drafted = drafter["kept_share_per_position"], drafter["drafted_share_per_position"]
        assert drafted == pytest.approx([1.0] * len(drafted))  # a model drafter drafts k every round
        assert kept == pytest.approx(acceptance)  # so its kept share is its acceptance by position
        step, call, target = drafter["draft_step_ms"], drafter["draft_call_ms"], report["target_step_ms"]
        assert call >= 0 and drafter["draft_call_alone_ms"] >= 0
        again = predict_by_k(kept, verify, step, target, 8, host_ms=host_ms, drafted_share=drafted, draft_call_ms=call)
        assert [p.speedup for p in again] == pytest.approx([p["speedup"] for p in by_k])
        best = max(by_k, key=lambda p: (p["speedup"], -p["k"]))
        assert drafter["best_k"] == best["k"] and drafter["best_speedup"] == best["speedup"]
        if best["speedup"] > 1:  # it pays: the fastest k is the one to set
            assert drafter["recommended_k"] == best["k"] and drafter["recommended_speedup"] == best["speedup"]
            low, high = drafter["recommended_speedup_range"]
            assert 0 < low <= high and drafter["recommended_route"] in report["drafters"]
        else:  # no chain pays: a draft tree that does is recommended instead, else the route none
            tree = drafter["recommended_tree"]
            tree_pays = tree is not None and tree["speedup"] > 1
            assert drafter["recommended_k"] is None and drafter["recommended_route"] == (name if tree_pays else "none")
    assert isinstance(report["disturbed"], bool) and report["target_step_drift"] >= 0
    assert (report["disturbed_reason"] is None) == (not report["disturbed"])


def test_acceptance_read_from_sessions_per_route(capsys: pytest.CaptureFixture[str]) -> None:
    report = _costs(capsys, "--sessions", str(PLAYGROUND_SESSION))
    session = load_session(PLAYGROUND_SESSION)
    for route in {r.drafter for r in session.main.rounds}:
        rounds = [r for r in session.main.rounds if r.drafter == route]
        depth = max(len(r.positions) for r in rounds)
        expected = [
            sum(1 for r in rounds if len(r.positions) > i and r.positions[i].kept)
            / sum(1 for r in rounds if len(r.positions) > i)
            for i in range(depth)
        ]
        assert report["drafters"][route]["acceptance_per_position"] == pytest.approx(expected)
        assert report["drafters"][route]["draft_costs_from"] == "rounds_and_alone"  # one draft length a session


def test_a_tree_session_reads_acceptance_by_depth_in_a_chain_sessions_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A width-2 session's rounds are read by depth along their kept path, as a chain's are by
    position: the same fields, one acceptance per depth (never one per node), drafting time > 0."""
    reports, sessions = {}, {}
    for width in (1, 2):
        folder = tmp_path / f"width-{width}"
        args = ["--target", "demo", "--prompt", PROMPT, "--max-tokens", "32", "--k", "4", "--width", str(width)]
        assert main(["run", *args, "--save", "--no-baseline", "--sessions-dir", str(folder)]) == 0
        (path,) = folder.glob("*.jsonl")
        sessions[width] = load_session(path)
        reports[width] = _costs(capsys, "--sessions", str(path))
    assert any(not is_chain(r.parents) for r in sessions[2].main.rounds)  # the tree session did branch
    assert every(is_chain(r.parents) for r in sessions[1].main.rounds)
    for route in {r.drafter for r in sessions[2].main.rounds}:
        tree = reports[2]["drafters"][route]
        assert set(tree) == set(reports[1]["drafters"][route])
        rounds = [r for r in sessions[2].main.rounds if r.drafter == route]
        depth = max(r.depth for r in rounds)
        assert max(r.nodes for r in rounds) > depth  # more nodes than depths: reading nodes would differ
        expected = [
            sum(r.num_accepted > i for r in rounds if r.depth > i) / sum(r.depth > i for r in rounds)
            for i in range(depth)
        ]
        assert tree["acceptance_per_position"] == pytest.approx(expected)
        assert tree["draft_step_ms"] > 0 and tree["best_k"] in range(1, 9)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-rows", "1"], "--max-rows must be from 2 to 65"),
        (["--repeats", "0"], "--repeats must be from 1 to 64"),
        (["--acceptance-tokens", "1"], "--acceptance-tokens must be at least 2"),
    ],
)
def test_bad_measurement_flags_get_one_line(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["costs", "--target", "demo", "--prompt", PROMPT, *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_max_rows_below_k_max_predicts_the_k_it_timed_and_says_how_to_get_the_rest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--max-rows bounds the k predicted (a round of k drafts is verified over k + 1 rows); left
    out, it is --k-max + 1, so the two agree."""
    quick = ["--target", "demo", "--prompt", PROMPT, "--repeats", "1", "--acceptance-tokens", "16", "--json"]
    for flags, rows, ks in ((["--max-rows", "5"], 5, 4), (["--k-max", "3"], 4, 3)):
        capsys.readouterr()
        assert main(["costs", *quick, *flags]) == 0
        out, err = capsys.readouterr()
        report = json.loads(out)
        assert [row["rows"] for row in report["verify_ms"]] == list(range(1, rows + 1))
        for drafter in report["drafters"].values():
            assert [p["k"] for p in drafter["predicted_speedup_by_k"]] == list(range(1, ks + 1))
        if "--max-rows" in flags:
            assert "predicting k up to 4 only" in err and "give --max-rows 9" in err and err.count("\n") == 1
        else:
            assert err == ""


def test_prompt_lookup_alone_gets_the_whole_verify_curve_and_a_k(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    flags = ["--target", "demo", "--draft", "lookup=prompt-lookup", "--prompt", PROMPT, "--repeats", "1"]
    assert main(["costs", *flags, "--acceptance-tokens", "24", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["rows"] for row in report["verify_ms"]] == list(range(1, 10))
    lookup = report["drafters"]["lookup"]
    assert lookup["draft_step_alone_ms"] < report["target_step_ms"] / 10  # copying costs next to nothing
    assert lookup["best_k"] in range(1, 9)
    assert main(["costs", *flags, "--acceptance-tokens", "24"]) == 0
    assert "timed up to" not in capsys.readouterr().err


@pytest.mark.parametrize("jitter", [0.0, 2.0])
def test_a_disturbed_measurement_ends_the_text_with_a_warning_and_says_so_in_json(jitter: float) -> None:
    """On the scripted backend, its clock quiet or jumping by up to 3x between readings."""
    backend = scripted_backend(drafters=("near", "lookup"))
    engine = SpecEngine(backend, clock=LoadedClock(backend.clock, jitter=jitter))
    prompt = backend.encode(CODE_PROMPT, raw=True)
    settings = SpecSettings()
    costs = measure_costs(engine, prompt, SamplingParams(), settings.acceptance_rule, max_rows=9)
    rounds = {d: measure_rounds(engine, prompt, settings, d, k=8, max_tokens=64) for d in backend.drafters}
    trees = {"near": [(2, 8, measure_rounds(engine, prompt, settings, "near", k=8, max_tokens=64, width=2))]}
    report = _report(costs, rounds, 8, len(prompt), trees)
    lines = _lines(report)
    (tree,) = report["drafters"]["near"]["trees"]
    assert (tree["width"], tree["nodes"], tree["depth"]) == (2, 8, 4) and report["drafters"]["lookup"]["trees"] == []
    assert any(line.strip().startswith("tree of 8, width 2:") for line in lines)
    assert json.loads(json.dumps(report))["disturbed"] is bool(jitter)
    if jitter:
        assert "busy" in report["disturbed_reason"]
        assert lines[-1].startswith("warning: ") and report["disturbed_reason"] in lines[-1]
    else:
        assert report["disturbed_reason"] is None and not any(line.startswith("warning") for line in lines)
