"""`specplay fidelity`: the statistics, target scoring, the report on tiny models, and the command.

Statistical tolerance: a row's log-likelihood per token is the mean of per-sample means, with
standard error s / sqrt(N) from their spread. Two rows use their seeds' random streams in
different ways, so their samples are effectively independent: rows drawn from one distribution
differ by more than 4 * sqrt(se_a^2 + se_b^2) with a chance of about 1e-3 (Student's t, as the
errors are estimated from 12 samples). Fixed seeds make every run of the test identical.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from rich.console import Console

from specplay.backends.mlx import MlxBackend
from specplay.cli import main
from specplay.cli.fidelity import fidelity_table
from specplay.engine.conversation import Exchange
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.fidelity.cells import row_cells
from specplay.fidelity.conversation import compared, session_turns
from specplay.fidelity.measure import (
    DRAFT_ROW,
    TARGET_ROW,
    FidelityReport,
    distinct_n,
    engine_generator,
    mean_and_se,
    measure_fidelity,
    report_path,
    similarities,
    sweep_rules,
)
from specplay.review.fidelity_page import sweep_review
from specplay.store import load_session
from tests.support.prompts import PROSE_PROMPT
from tests.support.tiny_models import TinyModels

SAMPLES, TOKENS = 12, 24


def test_distinct_n_pools_samples_without_spanning_them() -> None:
    samples = [[1, 2, 1, 2], [1, 2, 3]]
    assert distinct_n(samples, 1) == 3 / 7
    # bigrams: (1,2) (2,1) (1,2) | (1,2) (2,3); (2,1) across the boundary would be a sixth
    assert distinct_n(samples, 2) == 3 / 5
    assert distinct_n([[5]], 2) is None and distinct_n([], 1) is None


def test_similarities_average_over_references_leaving_out_the_sample_itself() -> None:
    references = [[1, 2, 3, 4], [1, 2, 3, 5], [9, 9, 9, 9]]
    # normalized similarity = 1 - distance / max length: one substitution in 4 is 0.75, four is 0
    assert similarities([[1, 2, 3, 4]], references) == [pytest.approx((1 + 0.75 + 0) / 3)]
    loo = similarities(references, references, leave_one_out=True)
    assert loo == [pytest.approx(0.75 / 2), pytest.approx(0.75 / 2), pytest.approx(0.0)]
    assert similarities([[1]], [[1]], leave_one_out=True) == [None]


def test_mean_and_se() -> None:
    mean, se = mean_and_se([1.0, None, 3.0])
    assert mean == 2.0 and se == pytest.approx(math.sqrt(2) / math.sqrt(2))
    assert mean_and_se([4.0]) == (4.0, None) and mean_and_se([None]) == (None, None)


def test_score_is_the_targets_log_softmax(backend: MlxBackend) -> None:
    prompt = backend.encode(PROSE_PROMPT, raw=True)
    tokens = [5, 77, 300, 12, 511]
    logits = backend.models["target"].model(mx.array([prompt + tokens]))[0].astype(mx.float32)
    logits = np.array(logits).astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    expected = [log_probs[len(prompt) - 1 + i, t] for i, t in enumerate(tokens)]
    assert backend.score(prompt, tokens) == pytest.approx(expected, abs=1e-4)
    assert backend.score(prompt, []) == []


@pytest.fixture(scope="module")
def report(backend: MlxBackend) -> FidelityReport:
    prompt_ids = backend.encode(PROSE_PROMPT, raw=True)
    settings = SpecSettings(route="far", sampling=SamplingParams(temperature=1.0))
    generate = engine_generator(SpecEngine(backend), PROSE_PROMPT, prompt_ids, settings, TOKENS)
    rules = sweep_rules({"mentored": [0.0, 1.0]})
    return measure_fidelity(generate, lambda ids: backend.score(prompt_ids, ids), rules, range(SAMPLES))


def _ll(report: FidelityReport, label: str) -> tuple[float, float]:
    row = report.row(label)
    assert row.log_likelihood_per_token is not None and row.log_likelihood_se is not None
    return row.log_likelihood_per_token, row.log_likelihood_se


def test_report_rows(report: FidelityReport) -> None:
    assert [r.label for r in report.rows] == [TARGET_ROW, DRAFT_ROW, "D=0", "D=1"]
    assert report.route == "far" and report.budgets == [0.0, 1.0]
    for row in report.rows:
        assert row.num_samples == len(row.samples) == SAMPLES
        assert [s.seed for s in row.samples] == list(range(SAMPLES))
        assert 0 < row.mean_length <= TOKENS and row.tokens_per_s is not None
        assert 0 < row.distinct_1 <= 1 and 0 < row.distinct_2 <= 1  # type: ignore[operator]
        assert 0 <= row.similarity_to_target < 1  # type: ignore[operator]
        speculative = row.mode == "speculative"
        assert (row.draft_acceptance_rate is not None) == speculative == (row.tv_spent_per_token is not None)
    # The target-only row's similarity is its samples' to one another: marked, and said so below the table.
    sims = {row.label: row_cells(row, speed_measured=True)[8] for row in report.rows}
    assert sims[TARGET_ROW].endswith("*") and not any(v.endswith("*") for k, v in sims.items() if k != TARGET_ROW)
    lossless, full = report.row("D=0"), report.row("D=1")
    assert lossless.tv_spent_per_token == 0.0
    assert full.draft_acceptance_rate == 1.0 and full.tv_spent_per_token > 0.3  # type: ignore[operator]
    assert full.mean_acceptance_length > lossless.mean_acceptance_length  # type: ignore[operator]


def test_lossless_keeps_the_targets_likelihood(report: FidelityReport) -> None:
    (target, se_t), (lossless, se_0) = _ll(report, TARGET_ROW), _ll(report, "D=0")
    assert abs(lossless - target) < 4 * math.hypot(se_t, se_0)


def test_full_budget_moves_toward_the_drafter(report: FidelityReport) -> None:
    (target, se_t), (draft, _), (lossless, se_0), (full, se_1) = (
        _ll(report, label) for label in (TARGET_ROW, DRAFT_ROW, "D=0", "D=1")
    )
    assert target - draft > 4 * se_t  # the far drafter writes what the target finds unlikely
    assert lossless - full > 4 * math.hypot(se_0, se_1)
    # Not all the way: at D = 1 every draft is accepted, but each round's bonus token is the target's.
    assert abs(full - draft) < abs(target - draft)


def test_table_fits_80_columns(report: FidelityReport) -> None:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(fidelity_table(report))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.split()[:1] == ["D=1"] and "1.00" in line for line in lines)


def test_the_sweep_review_shows_every_row_of_every_seed(report: FidelityReport) -> None:
    review = sweep_review(report, {"prompt": PROSE_PROMPT}, {}, speed_measured=True)
    assert [g.title for g in review.groups] == [f"seed {seed}" for seed in range(SAMPLES)]
    for group, seed in zip(review.groups, range(SAMPLES), strict=True):
        assert [c.title for c in group.columns] == [r.label for r in report.rows]
        assert group.reference is group.columns[0] and group.reference.kind == "target"
        for column, row in zip(group.columns, report.rows, strict=True):
            assert column.lane.token_ids == row.samples[seed].token_ids
    assert report.to_dict().keys() == {"seeds", "budgets", "route", "rows", "rules", "matched"}  # no events


def test_report_names_never_collide(tmp_path: Path) -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = report_path(tmp_path, now)
    assert first.name == "fidelity_2025-01-02T03-04-05.json"
    first.write_text("{}")
    assert report_path(tmp_path, now).name == "fidelity_2025-01-02T03-04-05_2.json"


def models(tiny: TinyModels) -> list[str]:
    return ["--target", str(tiny.target), "--draft", f"far={tiny.far}", "--prompt", PROSE_PROMPT, "--raw"]


def test_command_prints_saves_and_plots(tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--samples", "2", "--max-tokens", "6", "--budgets", "1,0", "--json", "--sessions-dir", str(tmp_path)]
    code = main(["fidelity", *models(tiny), *args])
    out, _ = capsys.readouterr()
    assert code == 0
    result = json.loads(out)
    assert [r["label"] for r in result["rows"]] == [TARGET_ROW, DRAFT_ROW, "D=0", "D=1"]
    assert result["route"] == "far" and result["seeds"] == [0, 1]
    saved, plot = Path(result["report"]), Path(result["plot"])
    assert saved.parent == tmp_path and saved.name.startswith("fidelity_") and saved.suffix == ".json"
    assert json.loads(saved.read_text())["rows"] == result["rows"]
    assert plot == saved.with_suffix(".png") and plot.read_bytes().startswith(b"\x89PNG")
    page = Path(result["page"])
    assert page == saved.with_suffix(".html")
    html = page.read_text(encoding="utf-8")
    assert html.count("<h2>seed ") == 2 and html.count('class="head" data-col="s0c') == 4
    assert "<h3>Over 2 seeds</h3>" in html and "<td>D=1</td>" in html
    assert not list(tmp_path.glob("*.tmp"))


def test_a_sweep_of_rules_plots_one_curve_each_and_shows_matched_texts(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = [
        "--rule",
        "mentored,lenience,cascade",
        "--budgets",
        "0,1",
        "--sweep",
        "lenience=1,8",
        "--sweep",
        "cascade=-1,1",
    ]
    args = ["--samples", "2", "--max-tokens", "8", "--json", "--sessions-dir", str(tmp_path)]
    assert main(["fidelity", *models(tiny), *sweep, *args]) == 0
    result = json.loads(capsys.readouterr().out)
    labels = [r["label"] for r in result["rows"]]
    assert labels == [
        TARGET_ROW,
        DRAFT_ROW,
        "D=0",
        "D=1",
        "lenience λ=1",
        "lenience λ=8",
        "cascade α=-1",
        "cascade α=1",
    ]
    assert result["rules"] == {"mentored": [0.0, 1.0], "lenience": [1.0, 8.0], "cascade": [-1.0, 1.0]}
    rows = {r["label"]: r for r in result["rows"]}
    # Each knob's lossless end gives the lossless output, the same seeds' same tokens.
    lossless = [s["token_ids"] for s in rows["D=0"]["samples"]]
    assert [s["token_ids"] for s in rows["lenience λ=1"]["samples"]] == lossless
    assert [s["token_ids"] for s in rows["cascade α=-1"]["samples"]] == lossless
    assert rows["cascade α=1"]["draft_acceptance_rate"] == 1.0 == rows["D=1"]["draft_acceptance_rate"]
    assert rows["D=0"]["tv_spent_per_token"] == 0.0 and rows["cascade α=1"]["tv_spent_per_token"] > 0
    assert {rows[label]["rule"] for label in result["matched"]} == {"mentored", "lenience", "cascade"}
    html = Path(result["page"]).read_text(encoding="utf-8")
    assert "at matched acceptance" in html
    assert html.count('class="head" data-col="s0c') == 2 + 3  # the references and one column per rule
    assert Path(result["plot"]).read_bytes().startswith(b"\x89PNG")


BAD = [
    (["--budgets", "0,1.5"], "--budgets must each be in [0, 1] (got 1.5)"),
    (["--budgets", "0,half"], "--budgets takes TV budgets in [0, 1] separated by commas (got '0,half')"),
    (["--tv", "0.5"], "--tv does not apply: give the TV budgets with --budgets"),
    (
        ["--rule", "mentored,fast"],
        "--rule takes rules from mentored, typical, lenience, cascade (or all), separated by commas (got 'fast')",
    ),
    (["--sweep", "lenience=2"], "--sweep names 'lenience', which --rule does not list"),
    (["--rule", "lenience", "--sweep", "lenience=0.5"], "--lenience must be at least 1 and finite (got 0.5)"),
    (["--lenience", "2"], "--lenience does not apply: each row has its own value (give them with --sweep lenience=)"),
]


@pytest.mark.parametrize(
    "args, message", BAD, ids=["range", "number", "tv", "rule", "unlisted", "lenience-range", "single-knob"]
)
def test_bad_input_is_one_line_before_loading_models(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # A missing target proves the check ran before any model was loaded.
    missing = ["--target", str(tiny.root / "missing"), "--draft", str(tiny.far), "--prompt", "x"]
    code = main(["fidelity", *missing, *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"specplay: error: {message}\n"


def test_an_unwritable_sessions_folder_is_one_clear_line(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = main(["fidelity", *models(tiny), "--sessions-dir", str(blocker / "sessions")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"specplay: error: cannot write the fidelity report to {blocker / 'sessions'}")


# --- a conversation, turn by turn ------------------------------------------------------------

CONVERSATION = Path(__file__).resolve().parents[1] / "data" / "saved_sessions" / "conversation-sampled-mentored.jsonl"
"""Three turns on the demo models (tests/data/saved_sessions/README.md)."""


def test_a_conversations_turns_follow_its_speculative_lanes_answers() -> None:
    session = load_session(CONVERSATION)
    turns = session_turns(session)
    assert [t.prompt for t in turns] == [t.prompt for t in session.turns] and len(turns) == 3
    assert [len(t.earlier) for t in turns] == [0, 1, 2] and {t.lane for t in turns} == {"speculative"}
    assert turns[2].earlier == tuple(Exchange(t.prompt, t.main.text) for t in session.turns[:2])
    # the target-only lane answered differently: its answers are not the prefix
    assert turns[1].earlier[0].answer != session.turns[0].lanes["target"].text
    assert turns[1].recorded_prompt_token_ids == session.turns[1].main.start.prompt_token_ids  # type: ignore[union-attr]


def test_a_cut_short_conversation_is_sampled_up_to_the_turn_it_was_cut_in(tmp_path: Path) -> None:
    lines = CONVERSATION.read_text(encoding="utf-8").splitlines()
    # the speculative lane's done event of turn 2 and everything after it lost: a run killed there
    dones = [i for i, line in enumerate(lines) if '"lane": "speculative", "kind": "done"' in line]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[: dones[1]]) + "\n", encoding="utf-8")
    session = load_session(cut)
    assert len(session.turns) == 2 and not session.complete
    turns = session_turns(session)
    assert [t.index for t in turns] == [0, 1] and turns[1].earlier == (Exchange(turns[0].prompt, session.main.text),)
    assert "session cut's 2 turns" in compared(session, turns)


def test_fidelity_of_a_conversation_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each turn's rows sampled after the session's speculative lane's earlier turns; the
    target-only samples too, so each turn's rows answer one conversation."""
    args = ["--target", "demo", "--samples", "2", "--max-tokens", "6", "--budgets", "0,1", "--raw"]
    code = main(["fidelity", "--session", str(CONVERSATION), *args, "--json", "--sessions-dir", str(tmp_path)])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    session = load_session(CONVERSATION)
    assert result["session"] == session.id and "the same conversation for all" in result["compared"]
    assert [t["turn"] for t in result["turns"]] == [0, 1, 2] and "rows" not in result
    for turn, record in zip(session.turns, result["turns"], strict=True):
        assert record["prompt"] == turn.prompt and record["of"] == 3
        assert [r["label"] for r in record["rows"]] == [TARGET_ROW, DRAFT_ROW, "D=0", "D=1"]
        # the prompt tokens the speculative lane answered this turn after, exactly
        assert record["prompt_tokens_as_recorded"] and turn.main.start is not None
        assert record["prompt_token_ids"] == list(turn.main.start.prompt_token_ids)
        assert record["earlier_turns_from"] == "speculative"
        assert [e["answer"] for e in record["earlier_turns"]] == [t.main.text for t in session.turns[: turn.index]]
    # a target-only sample of turn 3 is the target's own answer after that prefix, with that seed
    import specplay.backends.mlx  # noqa: F401
    from specplay.backends import open_stream
    from specplay.cli.configure import run_config
    from specplay.engine.live_controls import LiveControls
    from specplay.engine.request import Request

    config = run_config({"target": "demo", "temperature": 1.0})
    source = open_stream(config)
    try:
        third = session.turns[2]
        assert third.main.start is not None
        request = Request(third.prompt, third.main.start.prompt_token_ids, "target", 1, 6, ignore_eos=False)
        events = list(source.generate(request, LiveControls(config.settings)))
    finally:
        source.close()
    target_row = result["turns"][2]["rows"][0]
    assert target_row["samples"][1]["token_ids"] == list(events[-1].token_ids)  # type: ignore[attr-defined]
    # one plot per turn and one page with every turn
    assert [Path(p).name for p in result["plots"]] == [
        Path(result["report"]).stem + f"-turn-{n}.png" for n in (1, 2, 3)
    ]
    assert all(Path(p).read_bytes().startswith(b"\x89PNG") for p in result["plots"])
    page = Path(result["page"]).read_text(encoding="utf-8")
    # (a browser drops a line break just after <pre>)
    assert [
        html.unescape(p.removeprefix("\n")) for p in re.findall(r'<pre class="prompt">(.*?)</pre>', page, re.S)
    ] == [t.prompt for t in session.turns]
    assert page.count("<h2>Turn 2 of 3 · seed ") == 2 and page.count('class="head" data-col="t1s0c') == 4
    assert "<h3>Turn 3 of 3, over 2 seeds</h3>" in page and "the same conversation for all" in page
    assert json.loads(Path(result["report"]).read_text())["turns"] == result["turns"]

    quick = ["--target", "demo", "--samples", "1", "--max-tokens", "2", "--budgets", "0"]
    code = main(["fidelity", "--session", str(CONVERSATION), *quick, "--sessions-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.index("Turn 1 of 3 · ‹def fib(n):›") < out.index("Turn 2 of 3 · ‹⏎⏎def fact(n):›")
    assert out.count("log-lik: per token under the target") == 1 and out.count("\nplot ") == 3


def test_a_session_and_a_prompt_are_refused_together(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fidelity", "--session", str(CONVERSATION), "--target", "demo", "--prompt", "x"])
    assert code == 2
    assert capsys.readouterr().err == (
        "specplay: error: --session takes the prompts from the session; give --session or --prompt, not both\n"
    )
