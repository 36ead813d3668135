"""Session files: written as the run goes, finalized atomically, readable after any kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.engine.correction_rank import histogram_of
from specplay.store import SCHEMA_VERSION, SessionError, load_session
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels


def save_run(tiny: TinyModels, directory: Path, *extra: str) -> Path:
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    code = main(["run", *models, "--prompt", CODE_PROMPT, "--raw", "--save", "--sessions-dir", str(directory), *extra])
    assert code == 0
    (path,) = directory.glob("*.jsonl")
    return path


def test_round_trip(tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save_run(tiny, tmp_path, "--max-tokens", "24", "--json", "--temperature", "1", "--tv", "0.3")
    printed = json.loads(capsys.readouterr().out)
    session = load_session(path)
    assert session.complete and printed["session"] == str(path)
    assert session.header["schema_version"] == SCHEMA_VERSION and session.header["specplay_version"]
    assert session.header["prompt"] == CODE_PROMPT and session.header["prompt_token_ids"] == printed["prompt_token_ids"]
    models = session.header["backend"]["models"]
    assert set(models) == {"target", "near"} and len(models["target"]["weights_sha256"]) == 64
    assert list(session.lanes) == ["speculative", "target"]
    main_lane, baseline = session.main, session.baseline
    assert main_lane.token_ids == printed["token_ids"] and main_lane.sources == printed["sources"]
    assert main_lane.text == printed["text"] and main_lane.metrics == printed["metrics"]
    assert len(main_lane.rounds) == len(printed["rounds"]) and main_lane.settings.rule_params.tv_budget == 0.3
    assert baseline is not None and baseline.start is not None
    assert baseline.start.mode == "target" and baseline.start.seed == 0
    assert baseline.metrics["tokens_per_s"] > 0 and set(baseline.sources) == {"target"}
    assert "api_key" not in path.read_text()


def test_each_rejections_rank_is_kept(tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `far` is a model of its own: its drafts are often rejected.
    models = ["--target", str(tiny.target), "--draft", f"far={tiny.far}", "--max-tokens", "16", "--no-baseline"]
    code = main(["run", *models, "--prompt", CODE_PROMPT, "--raw", "--save", "--sessions-dir", str(tmp_path), "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    lane = load_session(next(tmp_path.glob("*.jsonl"))).main
    # Each rejection's rank among the drafter's tokens is kept, and the metrics count what it says.
    ranks = [p.correction_rank for r in lane.rounds for p in r.positions if p.outcome == "rejected"]
    assert ranks and None not in ranks
    assert ranks == [
        p["correction_rank"] for r in printed["rounds"] for p in r["positions"] if p["outcome"] == "rejected"
    ]
    assert lane.metrics["rejection_rank_histogram"] == histogram_of(ranks)
    assert printed["metrics"]["second_branch_share"] == lane.metrics["second_branch_share"] is not None


def test_no_baseline(tiny: TinyModels, tmp_path: Path) -> None:
    session = load_session(save_run(tiny, tmp_path, "--max-tokens", "5", "--no-baseline"))
    assert list(session.lanes) == ["speculative"] and session.baseline is None and session.complete


def test_a_killed_run_leaves_a_readable_incomplete_session(tiny: TinyModels, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "specplay", "run", "--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    command += ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "100000", "--ignore-eos", "--save"]
    writer = subprocess.Popen([*command, "--sessions-dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(tmp_path.glob("*.jsonl"))
            if files and files[0].read_text().count('"kind": "round"') >= 20:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the run wrote no rounds in time")
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    (path,) = files
    with path.open("a") as f:
        f.write('{"type": "event", "lane": "specul')  # a write torn by the kill
    session = load_session(path)
    assert not session.complete and not session.main.complete
    assert len(session.main.rounds) >= 20 and len(session.main.token_ids) >= 20
    assert session.main.text == "".join(session.main.texts)
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0


def test_bad_session_files_get_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = {"type": "header", "schema_version": SCHEMA_VERSION, "prompt": "x", "prompt_token_ids": [1], "lanes": []}
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text(json.dumps(header) + "\nnot json\n" + json.dumps({"type": "end"}) + "\n")
    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps(header | {"schema_version": SCHEMA_VERSION + 1}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cases = [
        (corrupt, "is corrupt: line 2 is not JSON"),
        (newer, f"has schema version {SCHEMA_VERSION + 1}, newer than this specplay reads"),
        (empty, "is empty"),
        (tmp_path / "missing.jsonl", "does not exist"),
    ]
    for path, message in cases:
        with pytest.raises(SessionError, match=message):
            load_session(path)
    before = corrupt.read_bytes()
    assert main(["sessions", "--sessions-dir", str(tmp_path), "--json"]) == 0  # lists what it can, flags the rest
    errors = {row["id"]: row["error"] for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert "is corrupt" in errors["corrupt"] and "newer than this specplay" in errors["newer"]
    assert corrupt.read_bytes() == before


def test_an_unwritable_sessions_folder_is_a_clear_error(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    args = ["run", "--target", str(tiny.target), "--mode", "target", "--prompt", "x", "--max-tokens", "2"]
    assert main([*args, "--save", "--sessions-dir", str(blocker / "sessions")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specplay: error: cannot write sessions to") and err.count("\n") == 1


def test_replay_reproduces_a_session_and_takes_changes(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = save_run(tiny, tmp_path, "--max-tokens", "16", "--temperature", "1", "--seed", "3", "--json", "--k", "3")
    original = json.loads(capsys.readouterr().out)
    assert main(["run", "--replay", first.stem, "--sessions-dir", str(tmp_path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["token_ids"] == original["token_ids"] and again["settings"] == original["settings"]
    assert main(["run", "--replay", str(first), "--tv", "1", "--json"]) == 0
    changed = json.loads(capsys.readouterr().out)
    assert changed["settings"]["rule_params"]["tv_budget"] == 1.0 and changed["settings"]["k"] == 3
    assert "corrected" not in changed["sources"]


def test_ctrl_c_stops_at_a_round_and_keeps_the_session(tiny: TinyModels, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "specplay", "run", "--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    command += ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "100000", "--ignore-eos", "--save"]
    run = subprocess.Popen([*command, "--sessions-dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while sum(f.stat().st_size for f in tmp_path.glob("*.jsonl")) < 20_000:
        assert time.monotonic() < deadline, "the run wrote no rounds in time"
        time.sleep(0.1)
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=60) == 130
    session = load_session(next(tmp_path.glob("*.jsonl")))
    assert session.main.done is not None and session.main.done.finish_reason == "cancelled"
    assert session.main.token_ids and not session.complete  # the target-only lane never ran


def test_older_sessions_say_what_their_source_could_do() -> None:
    from specplay.config.capabilities import MLX, VLLM_INSPECTION, vllm_native
    from specplay.store.codec import capabilities_from_header

    # Before the record: the backend the header names says it, through the same records.
    assert capabilities_from_header({"backend": {"backend": "mlx"}}) == MLX
    assert capabilities_from_header({}) == MLX
    assert capabilities_from_header({"backend": {"backend": "vllm"}}) == VLLM_INSPECTION
    native = capabilities_from_header({"backend": {"backend": "vllm", "mode": "native"}})
    assert native == vllm_native(baseline=True) and native.server_judges and not native.live_controls
    # The first record's spelling of server_judges.
    first = vllm_native(baseline=False).to_record()
    first["recolours"] = first.pop("server_judges")
    assert capabilities_from_header({"capabilities": first}) == vllm_native(baseline=False)


def test_ids_are_whole_at_any_width_and_a_unique_end_finds_a_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`specplay sessions` piped or in 80 columns shows whole ids, first; `-q` prints only them; any
    command that takes a session takes a unique beginning or end of its id."""
    from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    ids = sorted(write_session(tmp_path, lanes, prompt=f"a prompt long enough to be cut {i} " * 4).stem for i in (1, 2))
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ids and max(map(len, lines)) <= 80
    assert main(["sessions", "-q", "--sessions-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ids
    for session_id in ids:  # by the random end of its id, as a person copies it
        assert main(["export", session_id[-6:], "--format", "md", "--sessions-dir", str(tmp_path)]) == 0
        assert f"session {session_id}" in capsys.readouterr().out.replace("\\", "")
    assert main(["export", ids[0][:4], "--format", "md", "--sessions-dir", str(tmp_path)]) == 2
    assert "matches 2 sessions" in capsys.readouterr().err


def test_the_listing_says_what_its_columns_of_numbers_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the table, a key: `vs target` is the two lanes' token similarity (100% the same tokens,
    `-` where no target-only lane ran), beside what acceptance's τ and speedup are."""
    from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

    write_session(tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    write_session(tmp_path, {"speculative": speculative_events()}, prompt="no baseline")
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows, key = lines[0], lines[1:3], lines[3:]
    column = header.index("vs target")
    shown = sorted(row[column : column + len("vs target")].strip() for row in rows)
    assert shown == ["-", "100%"], rows  # the same tokens; no target-only lane
    assert key[0].startswith("acceptance: draft acceptance rate, τ = mean acceptance length")
    assert key[1].startswith("speedup: the speculative lane's tokens/s over the target-only lane's")
    assert " ".join(key[2:]) == (
        "vs target: how alike the speculative lane's tokens are to the target-only lane's, 1 − edit distance / "
        "the longer one's length (100%: the same tokens; -: no target-only lane)"
    )
