"""`specplay run`: the headless contract, and one clear line for each kind of bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from specplay.cli import main
from specplay.store import list_session_files, load_session
from tests.support.checks import every
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["run", *args])
    out, err = capsys.readouterr()
    return code, out, err


def models(tiny: TinyModels) -> list[str]:
    return ["--target", str(tiny.target), "--draft", f"near={tiny.near}", "--draft", str(tiny.far)]


def test_json_output(tiny: TinyModels, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, *models(tiny), "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "20", "--json", "--ignore-eos"
    )
    assert code == 0
    (line,) = out.splitlines()
    result = json.loads(line)
    assert result["mode"] == "speculative" and result["route"] == "near" and result["seed"] == 0
    assert len(result["token_ids"]) == len(result["sources"]) == 20
    assert set(result["sources"]) <= {"accepted", "relaxed", "corrected", "bonus"}
    assert sum(len(r["sources"]) for r in result["rounds"]) == 20
    assert {"route", "nodes", "depth", "k_asked", "drafted", "parents", "num_accepted"} <= result["rounds"][0].keys()
    for r in result["rounds"]:  # a chain: the tree of width 1, its nodes its depth
        assert r["parents"] == list(range(-1, r["nodes"] - 1)) and r["nodes"] == r["depth"] == len(r["drafted"])
    metrics = result["metrics"]
    for name in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens", "mean_acceptance_length"):
        assert metrics[name] is not None
    assert metrics["mean_acceptance_length"] == pytest.approx(
        1 + metrics["num_accepted_draft_tokens"] / metrics["num_spec_steps"]
    )
    assert metrics["num_spec_steps"] == len(result["rounds"])


def test_target_mode_and_samples(tiny: TinyModels, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--target", str(tiny.target), "--prompt", "hello", "--raw", "--mode", "target", "--max-tokens", "8"]
    code, out, _ = run_cli(capsys, *args, "--json", "--samples", "3", "--seed", "7", "--temperature", "1")
    assert code == 0
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["seed"] for r in results] == [7, 8, 9]
    assert every(r["route"] is None and r["rounds"] == [] and r["metrics"]["num_spec_steps"] is None for r in results)
    assert every(set(r["sources"]) == {"target"} for r in results)
    assert len({tuple(r["token_ids"]) for r in results}) > 1


def test_text_output_ends_with_a_stats_line(tiny: TinyModels, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *models(tiny), "--prompt", "hello", "--raw", "--max-tokens", "10", "--route", "far")
    assert code == 0
    stats = out.strip().splitlines()[-1]
    assert stats.startswith("speculative · route far · k 4 fixed") and "mean acceptance length" in stats
    # far's drafts are mostly rejected: where the target's tokens stood among the drafter's
    assert re.search(r" · rejection ranks 1:\d+ 2:\d+ 3:\d+ 4:\d+ other:\d+; a second branch saves \d+% · ", stats)


def test_the_stats_line_calls_the_default_rule_lossless_and_counts_rounds(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str]
) -> None:
    # One token is one round; the rule is named as the playground names it.
    args = [*models(tiny), "--prompt", "hello", "--raw", "--ignore-eos"]
    code, out, _ = run_cli(capsys, *args, "--max-tokens", "1")
    assert code == 0 and " · lossless (mentored D 0) · " in out and " · 1 token · " in out and " · 1 round · " in out
    code, out, _ = run_cli(capsys, *args, "--max-tokens", "12", "--k", "1")
    assert code == 0 and re.search(r" · 12 tokens · .* · ([2-9]|1[0-2]) rounds · ", out)


def test_counterfactual_routes_and_a_relaxed_rule_in_json(tiny: TinyModels, capsys: pytest.CaptureFixture[str]) -> None:
    args = [*models(tiny), "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "24", "--json", "--ignore-eos"]
    code, out, _ = run_cli(
        capsys, *args, "--counterfactual", "--rule", "lenience", "--lenience", "3", "--temperature", "1"
    )
    assert code == 0
    result = json.loads(out)
    assert result["settings"]["rule"] == "lenience" and result["settings"]["rule_params"]["lenience"] == 3.0
    # Other tools rely on these names: one entry per drafter, the routed one's as committed.
    counterfactual = result["counterfactual"]
    assert set(counterfactual) == {"near", "far"}
    rounds = result["rounds"]
    assert counterfactual["near"]["accepted_length_per_round"] == [r["num_accepted"] for r in rounds]
    assert counterfactual["far"]["accepted_length_per_round"] == [
        next(c["num_accepted"] for c in r["counterfactuals"] if c["route"] == "far") for r in rounds
    ]
    best = max(entry["mean_acceptance_length"] for entry in counterfactual.values())
    assert result["route_regret"] == pytest.approx(best - counterfactual["near"]["mean_acceptance_length"])
    assert result["metrics"]["counterfactual_ms"] > 0
    code, out, _ = run_cli(capsys, *args)
    assert json.loads(out)["counterfactual"] is None and json.loads(out)["route_regret"] is None


def test_text_output_names_the_rule_and_the_counterfactual_routes(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*models(tiny), "--prompt", "hello", "--raw", "--max-tokens", "10", "--route", "far"]
    code, out, _ = run_cli(capsys, *args, "--rule", "cascade", "--cascade-alpha", "0.1", "--counterfactual")
    assert code == 0
    stats = out.strip().splitlines()[-1]
    assert "cascade α 0.1" in stats and "counterfactual mean acceptance length: " in stats and "route regret" in stats


def test_prompt_file(tiny: TinyModels, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(CODE_PROMPT)
    code, out, _ = run_cli(capsys, *models(tiny), "--prompt-file", str(prompt), "--raw", "--max-tokens", "4", "--json")
    assert code == 0 and json.loads(out)["route"] == "near"


BAD_INPUTS = [
    (["--target", "{root}/missing", "--prompt", "x", "--mode", "target"], "'{root}/missing' is no folder here"),
    (["--target", "nobody/not-a-cached-model", "--prompt", "x", "--mode", "target"], "not in the Hugging Face cache"),
    (["--target", "my models/target", "--prompt", "x", "--mode", "target"], "'my models/target' is no folder here"),
    (["--draft", "{other_vocab}", "--prompt", "x"], "does not share the target's token mapping: id"),
    (["--draft", "{recurrent}", "--prompt", "x"], "cannot be rewound"),
    (["--draft", "{near}", "--prompt", "x", "--route", "nope"], "--route 'nope' is not a drafter"),
    (["--draft", "{near}", "--prompt", "x", "--k", "0"], "--k must be between 1 and 64 (got 0)"),
    (["--draft", "{near}", "--prompt", "x", "--tv", "1.5"], "--tv must be in [0, 1] (got 1.5)"),
    (["--draft", "{near}", "--prompt", "x", "--temperature", "-1"], "--temperature must be 0 or more"),
    (["--draft", "{near}", "--prompt-file", "{root}/nope.txt"], "--prompt-file '{root}/nope.txt' does not exist"),
    (["--prompt", "x"], "--draft is needed in speculative mode"),
    (["--draft", "{near}", "--draft", "{near}", "--prompt", "x"], "--draft names 'near' twice"),
    (
        ["--draft", "{near}", "--prompt", "x", "--rule", "lenience", "--lenience", "0.5"],
        "--lenience must be at least 1",
    ),
    (["--draft", "{near}", "--prompt", "x", "--cascade-alpha", "2"], "--cascade-alpha must be in [-1, 1] (got 2.0)"),
    (["--draft", "{near}", "--prompt", "x", "--typical-epsilon", "nan"], "--typical-epsilon must be 0 or more"),
]


@pytest.mark.parametrize(
    "args, message", BAD_INPUTS, ids=[m.split()[0] + str(i) for i, (_, m) in enumerate(BAD_INPUTS)]
)
def test_bad_input_gets_one_clear_line(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    paths = {"root": tiny.root, "near": tiny.near, "other_vocab": tiny.other_vocab, "recurrent": tiny.recurrent}
    args = [a.format(**paths) for a in args]
    if "--target" not in args:
        args = ["--target", str(tiny.target), *args]
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("specplay: error: ")
    assert message.format(**paths) in err


def test_a_real_process_fails_cleanly(tiny: TinyModels) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specplay",
            "run",
            "--target",
            str(tiny.target),
            "--draft",
            str(tiny.other_vocab),
            "--prompt",
            "x",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_usage_errors_are_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "specplay", "run", "--k", "x"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_a_model_in_the_hugging_face_cache_loads_offline(tiny: TinyModels, tmp_path) -> None:
    # The cache layout huggingface_hub writes: refs/main names a snapshot folder.
    repo = tmp_path / "hub" / "models--someone--tiny-target"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for file in tiny.target.iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")}
    command = [sys.executable, "-m", "specplay", "run", "--target", "someone/tiny-target", "--mode", "target"]
    result = subprocess.run(
        [*command, "--prompt", "x", "--max-tokens", "3", "--json"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["token_ids"]) == 3


def test_a_checkpoint_that_needs_remote_code_is_refused(
    tiny: TinyModels, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    custom = tmp_path / "custom"
    custom.mkdir()
    for file in tiny.target.iterdir():
        (custom / file.name).write_bytes(file.read_bytes())
    config = json.loads((custom / "config.json").read_text())
    config |= {"model_type": "my_research_model", "auto_map": {"AutoModelForCausalLM": "modeling.MyModel"}}
    (custom / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "--target", str(custom), "--mode", "target", "--prompt", "x")
    assert code == 2 and err.count("\n") == 1
    assert "of type 'my_research_model' needs remote code (its own Python files)" in err


def test_compare_runs_the_target_only_lane_and_prints_the_speedup_without_saving(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    args = [*models(tiny), "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "16", "--ignore-eos"]
    code, out, err = run_cli(capsys, *args, "--sessions-dir", str(tmp_path))
    assert code == 0 and "speedup" not in out + err  # the speculative lane alone, as the help says
    code, out, err = run_cli(capsys, *args, "--compare", "--sessions-dir", str(tmp_path))
    assert code == 0 and re.search(r"speedup \d+\.\d\dx", out + err), out + err
    code, out, _ = run_cli(capsys, *args, "--compare", "--json", "--sessions-dir", str(tmp_path))
    (result,) = [json.loads(line) for line in out.splitlines()]
    assert len(result["baseline"]["token_ids"]) == 16 and "session" not in result
    assert not list(tmp_path.iterdir())  # type: ignore[attr-defined]  # nothing saved


def test_trees_run_save_read_and_review(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str], tmp_path: os.PathLike[str]
) -> None:
    """`--tree N` drafts trees (width 2 when no width is given): `--json` gives each round's parent
    list, the saved session reads them back, and the review page shows the tree rounds level by level."""
    args = [*models(tiny), "--route", "far", "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "24", "--ignore-eos"]
    code, out, _ = run_cli(capsys, *args, "--tree", "6", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["settings"]["width"] == 2 and result["settings"]["tree_nodes"] == 6
    trees = [r["parents"] for r in result["rounds"]]
    assert trees and every(p is not None and len(p) <= 6 for p in trees)
    assert any(p != list(range(-1, len(p) - 1)) for p in trees)  # some round branched

    code, _, _ = run_cli(capsys, *args, "--width", "3", "--save", "--sessions-dir", str(tmp_path))
    assert code == 0
    (path,) = list_session_files(tmp_path)
    rounds = load_session(path).main.rounds
    assert rounds and any(r.nodes > r.depth for r in rounds)  # some round branched
    assert main(["export", str(path), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert "depth 1:" in page and " nodes</td>" in page  # a level of alternatives, and the draft's size


def test_trees_are_refused_in_one_line_under_a_relaxed_rule(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, *models(tiny), "--prompt", "hi", "--width", "2", "--tv", "0.3")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "judged losslessly only" in err


def test_trees_are_refused_in_one_line_on_a_vllm_server(capsys: pytest.CaptureFixture[str]) -> None:
    """Checked from the capabilities before any request: no server need be there."""
    code, out, err = run_cli(
        capsys, "--backend", "vllm", "--target-url", "http://127.0.0.1:9", "--prompt", "hi", "--width", "2"
    )
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "draft trees cannot run here" in err
