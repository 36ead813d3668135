"""`specplay router train/eval` and `--router FILE` end to end: on counterfactual sessions of the
shipped demo models (drafters base, prose and prompt lookup), and refusals in one line."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from specplay.cli import main
from specplay.config.demo import demo_model_paths
from specplay.engine.routers.learned import fit_router
from specplay.engine.routers.routing import CodeProseRouter
from specplay.router_training.router_file import load_router, write_router
from specplay.router_training.scores import session_scores
from specplay.store import list_session_files, load_session
from tests.support.checks import every

SAVED = Path(__file__).resolve().parents[1] / "data" / "saved_sessions"
TARGET_ONLY_AND_NO_COUNTERFACTUALS = SAVED / "run-greedy-lossless.jsonl"
PROMPTS = [
    "def area(r):\n    return 3.14 * r * r\n\n\ndef perimeter(r):\n",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Fix the spelling in this and return it in full:\n\nThe keeper climbd the stairs evry evening at dusk.",
    "import os\n\nfor name in os.listdir('.'):\n",
]
STORY = PROMPTS[1]


def _models() -> list[str]:
    """The demo target with its drafters base and prose, and prompt lookup."""
    _, folders = demo_model_paths()
    drafters = [f"base={folders['base']}", f"prose={folders['prose']}", "lookup=prompt-lookup"]
    return ["--target", "demo", *(flag for d in drafters for flag in ("--draft", d))]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each prompt run once, greedy, 16 tokens, with counterfactual routes, saved."""
    directory = tmp_path_factory.mktemp("router-sessions")
    for prompt in PROMPTS:
        argv = ["run", *_models(), "--counterfactual", "--max-tokens", "16", "--ignore-eos", "--raw", "--save"]
        argv += ["--no-baseline", "--sessions-dir", str(directory), "--prompt", prompt, "--json"]
        assert main(argv) == 0
    return directory


def _synthetic_router(path: Path, drafters: list[str], story_to: str) -> Path:
    """A router that sends stories to `story_to` and anything else to the first other drafter."""
    other = next(d for d in drafters if d != story_to)
    prompts = [STORY, "Write a story about a ship.", "def f(x):\n    return x", "import sys\nprint(sys.argv)"]
    labels = [story_to, story_to, other, other]
    fitted = fit_router(prompts, np.eye(len(drafters))[[drafters.index(x) for x in labels]], drafters)
    write_router(path, dataclasses.replace(fitted, unproven=None), {})  # as if it beat the heuristic in training
    return path


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_train_then_eval_on_real_counterfactual_sessions(
    sessions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "router.json"
    capsys.readouterr()
    assert main(["router", "train", str(sessions), str(TARGET_ONLY_AND_NO_COUNTERFACTUALS), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "trained on 4 sessions of drafters base, lookup, prose"
    assert "skipped 1 session without counterfactual routes" in lines
    assert "prompts: raw (as written: --raw)" in lines  # the sessions were run with --raw
    # Four sessions cannot be held out in folds: the router is untested, so auto keeps the heuristic.
    assert (
        "too few sessions to hold any out, so it is untested: --route auto keeps the heuristic's choices "
        "(train on more sessions)"
    ) in lines
    assert any(line.startswith("warning: 4 sessions are too few to learn from") for line in lines)
    saved = [load_session(p) for p in list_session_files(sessions)]
    scores = {s.prompt: session_scores(s.main.rounds) for s in saved}
    assert every(v is not None and v.timed for v in scores.values())
    for session in saved:  # the scores' acceptance is the run's own counterfactual metric
        for name, score in scores[session.prompt].drafters.items():  # type: ignore[union-attr]
            expected = session.main.metrics["counterfactual"][name]["mean_acceptance_length"]
            assert score.mean_acceptance_length == pytest.approx(expected)
    record = json.loads(out.read_text())
    assert record["drafters"] == ["base", "lookup", "prose"] and record["trained_on"]["score"] == "speed"
    best = [v.best("speed") for v in scores.values()]  # type: ignore[union-attr]
    singles = [b[0] for b in best if len(b) == 1]
    assert record["trained_on"]["labels"] == {d: singles.count(d) for d in ("base", "lookup", "prose")}
    assert record["trained_on"]["sessions"] == 4 and record["trained_on"]["ties"] == len(best) - len(singles)

    capsys.readouterr()
    assert main(["router", "eval", str(sessions), "--router", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    router, _ = load_router(out)
    heuristic = {"code": "base", "prose": "prose"}
    assert report["score"] == "speed" and report["unit"] == "tokens per second" and report["sessions"] == 4
    assert report["trained_prompts"] == 4 and report["by_category"] is None  # no category recorded
    assert report["prompt_format"] == "prompts: raw (as written: --raw)"
    by_name = {p.name: s for p, s in zip(list_session_files(sessions), saved, strict=True)}
    for case in report["cases"]:
        session = by_name[case["session"]]
        session_score = scores[session.prompt]
        assert case["learned"] == router.classify(session.prompt)
        assert case["confidence"] == pytest.approx(router.confidence(session.prompt)) and case["deferred"]
        assert case["heuristic"] == heuristic[CodeProseRouter().classify(session.prompt)]
        assert case["best"] == session_score.best("speed")  # type: ignore[union-attr]
        assert case["learned_regret"] == pytest.approx(session_score.regret("speed", case["learned"]))  # type: ignore[union-attr]
    assert report["learned"]["best_picks"] == sum(c["learned"] in c["best"] for c in report["cases"])
    # min_confidence 1: what `--route auto` picks is the heuristic's, every time, and said so.
    assert router.min_confidence == 1.0 and report["with_fallback"]["deferred"] == 4
    assert [c["with_fallback"] for c in report["cases"]] == [c["heuristic"] for c in report["cases"]]
    assert report["with_fallback"]["best_picks"] == report["heuristic"]["best_picks"]
    mean = sum(c["heuristic_regret"] for c in report["cases"]) / 4
    assert report["heuristic"]["mean_regret"] == pytest.approx(mean)

    capsys.readouterr()
    assert main(["router", "eval", str(sessions), "--router", str(out), "--score", "acceptance"]) == 0
    text = capsys.readouterr().out
    assert "best drafter by tokens per round" in text and "heuristic" in text
    assert "note: 4 of these sessions' prompts were among its training prompts" in text
    sure = sorted(router.confidence(by_name[c["session"]].prompt) for c in report["cases"])
    assert f"its confidence in its picks: median {statistics.median(sure):.0%}, lowest {sure[0]:.0%}\n" in text
    assert (
        "--route auto keeps the heuristic's choices with this router: it was trained on too few sessions (4) to be "
        "tested against the heuristic (train on 5 or more)\n"
    ) in text


def test_route_auto_asks_the_router_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The heuristic sends the story to prose; the learned router file given, to lookup."""
    path = _synthetic_router(tmp_path / "r.json", ["base", "lookup", "prose"], story_to="lookup")
    common = [*_models(), "--max-tokens", "4", "--raw", "--prompt", STORY, "--json", "--no-baseline"]
    capsys.readouterr()
    saving = ["--save", "--sessions-dir", str(tmp_path)]
    assert main(["run", *common, "--route", "auto", "--router", str(path), *saving]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["route"] == "lookup"
    assert run["route_choice"]["chosen_by"] == "learned" and run["route_choice"]["drafter"] == "lookup"
    assert run["route_choice"]["confidence"] == pytest.approx(load_router(path)[0].confidence(STORY))
    header = load_session(Path(run["session"])).header
    router_record = header["request"]["router"]
    assert router_record["file"] == "r.json" and router_record["drafters"] == ["base", "lookup", "prose"]
    assert router_record["sha256"] == load_router(path)[1]
    assert header["request"]["route_map"] == {"base": "base", "lookup": "lookup", "prose": "prose"}
    assert main(["run", *common]) == 0
    assert json.loads(capsys.readouterr().out)["route"] == "prose"  # the heuristic's, with no --router
    # Replayed without --router, the session's map of the learned router's classes is left behind.
    assert main(["run", "--replay", run["session"], "--max-tokens", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["route"] == "prose"


def test_a_router_for_other_drafters_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _synthetic_router(tmp_path / "r.json", ["base", "lookup", "prose"], story_to="lookup")
    says = (
        f"specplay: error: --router {str(path)!r} was trained for drafters base, lookup, prose, and this run's are "
        "base, prose: train it again on sessions of these drafters"
    )
    for command in ("run", "tui", "bench"):
        argv = [command, "--target", "demo", "--router", str(path)]
        argv += ["--prompt", "x"] if command != "bench" else ["--out", str(tmp_path / "bench")]
        assert _error(capsys, argv).startswith(says)
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize("command", ["run", "eval"])
def test_a_damaged_router_file_is_refused_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _synthetic_router(tmp_path / "r.json", ["base", "lookup", "prose"], story_to="lookup")
    path.write_bytes(path.read_bytes()[:-2000])
    argv = ["run", "--target", "demo", "--prompt", "x", "--router", str(path)]
    if command == "eval":
        argv = ["router", "eval", str(SAVED), "--router", str(path)]
    err = _error(capsys, argv)
    assert f"--router {str(path)!r} is damaged: its text is not JSON" in err and "specplay router train" in err


def test_no_session_to_learn_from_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = [p for p in list_session_files(SAVED) if session_scores(load_session(p).main.rounds) is None]
    assert len(plain) == 4  # the fifth saved session has counterfactual rounds
    turns = sum(len(load_session(p).turns) for p in plain)  # a conversation's turns are examples each
    assert turns == 6
    err = _error(capsys, ["router", "train", *map(str, plain), "--out", str(tmp_path / "r.json")])
    assert err.startswith(f"specplay: error: SESSION|DIR hold no session that can be scored (skipped {turns} sessions")
    assert "without counterfactual routes" in err and not (tmp_path / "r.json").exists()
    err = _error(capsys, ["router", "train", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r.json")])
    assert "is neither a session file nor a folder of sessions" in err


def test_an_unsure_router_lets_the_heuristic_choose_and_run_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same router with a threshold above its confidence: the heuristic sends the story to
    prose, and `run` says the learned router was unsure, in text and in JSON."""
    path = _synthetic_router(tmp_path / "r.json", ["base", "lookup", "prose"], story_to="lookup")
    record = json.loads(path.read_text())
    sure = load_router(path)[0].confidence(STORY)
    record["min_confidence"] = 1.0
    path.write_text(json.dumps(record))
    common = [*_models(), "--max-tokens", "2", "--raw", "--prompt", STORY, "--no-baseline", "--router", str(path)]
    capsys.readouterr()
    assert main(["run", *common, "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["route"] == "prose" and run["route_choice"]["chosen_by"] == "heuristic"
    assert main(["run", *common]) == 0
    said = capsys.readouterr().out
    assert (
        f"auto: prose prompt → prose (the heuristic, as the learned router r.json is {sure:.0%} sure, below its "
        "100%; the drafter named prose)"
    ) in said


def test_a_router_file_auto_does_not_follow_is_said_by_run_and_kept_by_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router file from before routers were tested against the heuristic (no `beats_heuristic`)
    would send the story to lookup; auto keeps the heuristic's prose, `run` says why in its route
    line, and the saved session keeps the reason for `specplay sessions`."""
    path = _synthetic_router(tmp_path / "r.json", ["base", "lookup", "prose"], story_to="lookup")
    record = json.loads(path.read_text())
    del record["beats_heuristic"]
    path.write_text(json.dumps(record))
    common = [*_models(), "--max-tokens", "2", "--raw", "--prompt", STORY, "--no-baseline", "--router", str(path)]
    capsys.readouterr()
    assert main(["run", *common, "--save", "--sessions-dir", str(tmp_path)]) == 0
    why = (
        "auto: prose prompt → prose (the heuristic, as the learned router r.json was written by an older specplay, "
        "which did not test its picks against the heuristic's: train it again to have it followed; the drafter "
        "named prose)"
    )
    assert why in capsys.readouterr().out
    assert main(["sessions", "--sessions-dir", str(tmp_path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["route"], row["route_chosen_by"], row["route_why"]) == ("prose", "heuristic", why)
    assert row["route_deferred"].startswith("the learned router r.json was written by an older specplay")
    monkeypatch.setenv("COLUMNS", "200")  # the listing's models column is shown from 120 columns
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "target + prose (heuristic: the learned router deferred)" in listed  # `target`: the demo target's folder
