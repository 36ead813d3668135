"""Session files a user, an editor or a crash damaged: every reader gives a loaded session or one
clear line, never a traceback; text with any line boundary survives the round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.cli import main
from specplay.cli.sessions import summarize
from specplay.errors import SpecplayError
from specplay.review import FORMATS, export_sessions
from specplay.store import Session, SessionError, load_session
from specplay.store.diff import token_diff
from specplay.store.replay import session_config
from tests.support.mutations import JSON_VALUES, paths, replace_at
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

LINE_BOUNDARIES = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_every_unicode_line_boundary_survives_both_ways(tmp_path: Path) -> None:
    prompt = "a" + "b".join(LINE_BOUNDARIES) + "z"
    path = write_session(
        tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())}, prompt
    )
    assert len(path.read_bytes().split(b"\n")) == len(path.read_text(encoding="utf-8").split("\n"))
    session = load_session(path)
    assert session.prompt == prompt and session.complete
    assert json.loads(path.read_text(encoding="utf-8").split("\n")[0])["prompt"] == prompt
    # The raw log an export writes is a session file too, whatever the prompt holds.
    log = tmp_path / "log.jsonl"
    log.write_text(export_sessions([session], "jsonl"), encoding="utf-8")
    assert load_session(log).prompt == prompt


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def _rewrite(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _set(kind: str, key: str, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(records: list[dict[str, Any]]) -> None:
        record = next(r for r in records if r.get("kind") == kind)
        record["data"][key] = value

    return change


def _header(key: str, value: Any = None, drop: bool = False) -> Callable[[list[dict[str, Any]]], None]:
    def change(records: list[dict[str, Any]]) -> None:
        if drop:
            del records[0][key]
        else:
            records[0][key] = value

    return change


def _token_id_list(records: list[dict[str, Any]]) -> None:
    next(r for r in records if r.get("kind") == "round")["data"]["tokens"][0]["token_id"] = [1]


def _start_as_list(records: list[dict[str, Any]]) -> None:
    next(r for r in records if r.get("kind") == "start")["data"] = [1, 2]


def _done_without_metrics(records: list[dict[str, Any]]) -> None:
    del next(r for r in records if r.get("kind") == "done")["data"]["metrics"]


DAMAGE = {
    "header without prompt": (_header("prompt", drop=True), "header lacks 'prompt'"),
    "backend as a list": (_header("backend", [1]), "header.backend is a list, not an object"),
    "models as a list": (_header("backend", {"models": []}), "header.backend.models is a list"),
    "request seed as text": (_header("request", {"seed": "x"}), "header.request.seed is 'x', not a whole number"),
    "done without metrics": (_done_without_metrics, "record 5 (done) lacks 'metrics'"),
    "start data as a list": (_start_as_list, "record 2 (start) is a list, not an object"),
    "a list for a token id": (_token_id_list, "record 3 (round).tokens[0].token_id is a list, not a whole number"),
    "a NaN time": (_set("round", "draft_ms", float("nan")), "draft_ms is nan, not a finite number"),
    "a k as text": (_set("round", "k_asked", "4"), "record 3 (round).k_asked is '4', not a whole number"),
    # A round's layout, its drafted tokens and its positions agree, within what a run can draft.
    "parents for fewer nodes": (_set("round", "parents", [-1]), "(round).drafted holds"),
    "parents that are no tree": (_set("round", "parents", [3, 0]), "(round).parents is no tree"),
    "a draft past the node limit": (_set("round", "parents", [-1] * 20_000), "more than a round drafts (64)"),
    "settings out of range": (
        lambda records: next(r for r in records if r.get("kind") == "start")["data"]["settings"].update(k=0),
        "k must be between 1 and 64",
    ),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_sessions_of_the_wrong_shape_are_one_line_in_every_command(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, message = DAMAGE[name]
    good = write_session(tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    records = _records(good)
    bad = tmp_path / "bad.jsonl"
    change(records)
    _rewrite(bad, records)
    with pytest.raises(SessionError, match="is corrupt") as error:
        load_session(bad)
    assert message in str(error.value) and str(bad) in str(error.value)
    for command in (
        ["diff", str(bad)],
        ["export", str(bad)],
        ["run", "--replay", str(bad)],
        ["tui", "--open", str(bad)],
    ):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is corrupt" in err, (command, err)
    # The listing keeps every good session and flags the bad one.
    assert main(["sessions", "--sessions-dir", str(tmp_path), "--json"]) == 0
    rows = {row["id"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert "error" in rows["bad"] and rows[good.stem]["prompt"] == "def fib(n):"


def test_a_real_process_opening_a_bad_session_prints_one_line(tmp_path: Path) -> None:
    bad = _rewrite(tmp_path / "bad.jsonl", [{"type": "header", "schema_version": 1, "lanes": ["x"]}])
    for command in (["tui", "--open", str(bad)], ["export", str(bad)]):
        result = subprocess.run(
            [sys.executable, "-m", "specplay", *command], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1 and "header lacks 'prompt'" in result.stderr


# --- fuzzing the reader with records mutated from a real session ----------------------------------


def _use(session: Session) -> None:
    """What the commands do with a loaded session: any failure must be a SpecplayError."""
    summarize(session)
    for fmt in FORMATS:
        export_sessions([session], fmt)
    if session.baseline is not None:
        token_diff(session.main.token_ids, session.baseline.token_ids)
    session_config(session)


@pytest.fixture(scope="module")
def real_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("fuzz")
    lanes = {"speculative": speculative_events(ROUNDS), "target": target_events(same_as_rounds())}
    return _records(write_session(folder, lanes))


@settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fuzzed_sessions_load_or_fail_in_one_line(
    real_records: list[dict[str, Any]], tmp_path: Path, data: Any
) -> None:
    records: list[Any] = json.loads(json.dumps(real_records))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(records) - 1))
        action = data.draw(st.sampled_from(["replace", "drop", "duplicate"]))
        if action == "drop" and len(records) > 1:
            del records[i]
        elif action == "duplicate":
            records.insert(i, records[i])
        else:
            places = paths(records[i])
            records[i] = replace_at(records[i], data.draw(st.sampled_from(places)), data.draw(JSON_VALUES))
    path = tmp_path / "fuzzed.jsonl"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    cut = data.draw(st.sampled_from([len(text), len(text) - 1, len(text) // 2]))  # a torn last write
    path.write_text(text[:cut], encoding="utf-8")
    try:
        session = load_session(path)
    except SessionError as error:
        assert "\n" not in str(error) and str(path) in str(error)
        return
    try:
        _use(session)
    except SpecplayError as error:
        assert "\n" not in str(error)


def test_a_sessions_folder_that_is_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "sessions"
    blocker.write_text("not a folder")
    for command in (["sessions"], ["run", "--replay", "abc"], ["tui", "--open", "abc"]):
        assert main([*command, "--sessions-dir", str(blocker)]) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"the sessions folder {blocker} is a file, not a folder" in err, err
    assert main(["sessions", "--sessions-dir", str(tmp_path / "none-yet")]) == 0  # no folder: no sessions yet
