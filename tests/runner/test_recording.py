"""A playground conversation's session: one file, complete after every turn, readable mid-turn,
and a turn that cannot be written loses nothing written before."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from specplay.engine.events import DoneEvent
from specplay.runner.recording import RunRecorder
from specplay.store import list_session_files, load_session
from tests.support.scripted import SCRIPTED, scripted_backend
from tests.support.session_events import same_as_rounds, speculative_events, target_events
from tests.support.ui_helpers import scripted_config

LANES = ("speculative", "target")


def _recorder(tmp_path: Path, unsaved: list[str]) -> RunRecorder:
    return RunRecorder(
        scripted_config(scripted_backend(), tmp_path, raw=True),
        prompt="def fib(n):",
        lanes=LANES,
        identity={"backend": "scripted"},
        capabilities=SCRIPTED,
        route_map={},
        token_text=None,
        on_unsaved=unsaved.append,
    )


def _turn(recorder: RunRecorder, finish: bool = True) -> None:
    lanes = {
        "speculative": speculative_events(finish="length" if finish else None),
        "target": target_events(same_as_rounds(), finish="length" if finish else None),
    }
    for lane, events in lanes.items():
        for event in events:
            recorder.record(lane, event)
    recorder.flush()


def test_each_turn_finishes_the_one_session_and_a_turn_under_way_reads_as_incomplete(tmp_path: Path) -> None:
    unsaved: list[str] = []
    recorder = _recorder(tmp_path, unsaved)
    _turn(recorder)
    path, saved, failed = recorder.finish(None)
    assert path is not None and saved == f"; saved {path.name}" and not failed
    assert load_session(path).complete

    recorder.start_turn("now iteratively")
    _turn(recorder, finish=False)  # the app is killed mid-turn: what was written reads back
    midway = load_session(path)
    assert not midway.complete and [t.prompt for t in midway.turns] == ["def fib(n):", "now iteratively"]
    assert midway.turns[1].lanes["speculative"].events and midway.turns[0].lanes["target"].complete

    for lane in LANES:
        recorder.record(lane, next(e for e in speculative_events() if isinstance(e, DoneEvent)))
    assert recorder.finish(None)[0] == path
    session = load_session(path)
    assert session.complete and len(session.turns) == 2 and list_session_files(tmp_path) == [path]
    assert [line for line in path.read_text(encoding="utf-8").splitlines() if '"end"' in line] == ['{"type": "end"}']
    assert unsaved == []


def test_a_turn_that_cannot_be_written_keeps_the_turns_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unsaved: list[str] = []
    recorder = _recorder(tmp_path, unsaved)
    _turn(recorder)
    path, _, _ = recorder.finish(None)
    assert path is not None
    before = path.read_bytes()

    def full(*args: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    recorder.start_turn("now iteratively")  # the disk is full: this turn goes unsaved, the run goes on
    _turn(recorder)
    path_now, saved, failed = recorder.finish(None)
    assert path_now is None and failed and saved.startswith("; NOT saved: cannot go on writing the session ")
    assert unsaved == [saved.removeprefix("; NOT saved: ")] and "No space left on device" in unsaved[0]
    assert path.read_bytes() == before and load_session(path).complete  # the first turn, as it was
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # nothing half-written beside it
