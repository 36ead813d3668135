"""Earlier outputs read from a sessions folder for the drafters that remember (store/recall.py):
each target lane's answer turn by turn, newest sessions first, only the run's own target, within
the tokens asked for and the bounds on files and bytes; a file that cannot be read is left out and
counted, whatever is in it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.drafters import ModelConfig
from specplay.engine.events import Token
from specplay.store import recall
from specplay.store.recall import earlier_outputs
from tests.support.mutations import JSON_VALUES, paths, replace_at
from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

TARGET = ModelConfig("target", "target", "mlx", "models/target")


def answer(*ids: int) -> list[list[Token]]:
    """One round's tokens: all accepted but the last, a bonus."""
    return [[Token(i, f"t{i}", "accepted") for i in ids[:-1]] + [Token(ids[-1], f"t{ids[-1]}", "bonus")]]


def saved(folder: Path, name: str, *turns: tuple[int, ...], source: str = "models/target", draft: bool = False) -> Path:
    """A session named `name` (names order sessions by time) whose speculative and target-only lanes
    answer each turn alike; `draft`: a draft-only lane answers too, with other tokens."""

    def lanes(ids: tuple[int, ...]) -> dict[str, Any]:
        out = {"speculative": speculative_events(answer(*ids)), "target": target_events(same_as_rounds(answer(*ids)))}
        return out | ({"draft": target_events([(900 + i, "x") for i in range(3)])} if draft else {})

    later = [(f"turn {i}", lanes(ids)) for i, ids in enumerate(turns[1:], 2)]
    path = write_session(folder, lanes(turns[0]), source=source, later_turns=later)
    return path.rename(folder / f"{name}.jsonl")


def test_each_target_lanes_answer_is_read_turn_by_turn_oldest_first(tmp_path: Path) -> None:
    saved(tmp_path, "2026-01-01_a", (1, 2, 3))
    saved(tmp_path, "2026-01-02_b", (4, 5), (6, 7, 8), draft=True)
    read = earlier_outputs(tmp_path, TARGET, 1000)
    # Both lanes gave each answer (as at temperature 0): read once; never the draft-only lane's
    # 900s, the drafter's text rather than the target's.
    assert [(o.token_ids, o.where) for o in read.outputs] == [
        ((1, 2, 3), "session 2026-01-01_a"),
        ((4, 5), "session 2026-01-02_b"),
        ((6, 7, 8), "session 2026-01-02_b, turn 2"),
    ]
    assert (read.sessions, read.skipped, read.other_targets, read.stopped, read.tokens) == (2, 0, 0, None, 8)
    assert read.describe().startswith(f"read 8 tokens of 3 earlier outputs from 2 sessions in {tmp_path} (")


def test_the_newest_sessions_come_first_within_the_tokens_asked_for(tmp_path: Path) -> None:
    for day in range(1, 6):
        saved(tmp_path, f"2026-01-0{day}_x", (day, day, day))
    read = earlier_outputs(tmp_path, TARGET, 7)  # two sessions' six tokens, then a third's reach it
    assert [o.token_ids[0] for o in read.outputs] == [3, 4, 5] and read.sessions == 3


def test_unreadable_files_and_other_targets_are_left_out_and_counted(tmp_path: Path) -> None:
    good = saved(tmp_path, "2026-01-05_good", (1, 2, 3))
    saved(tmp_path, "2026-01-04_other", (7, 7), source="models/another")
    (tmp_path / "2026-01-01_garbage.jsonl").write_bytes(b"\x00\xff not json at all\n{{{")
    (tmp_path / "2026-01-02_empty.jsonl").write_bytes(b"")
    lines = good.read_text(encoding="utf-8").splitlines()
    damaged = [
        line if '"kind": "done"' not in line else line.replace('"token_ids": [', '"token_ids": ["x", ')
        for line in lines
    ]
    (tmp_path / "2026-01-03_damaged.jsonl").write_text("\n".join(damaged) + "\n", encoding="utf-8")
    (tmp_path / "2026-01-03_folder.jsonl").mkdir()  # not a file: not a session either
    torn = good.read_text(encoding="utf-8")
    (tmp_path / "2026-01-04_torn.jsonl").write_text(torn[: len(torn) - 5], encoding="utf-8")  # a kill mid-write
    read = earlier_outputs(tmp_path, TARGET, 1000)
    assert [o.where for o in read.outputs] == ["session 2026-01-04_torn", "session 2026-01-05_good"]
    assert (read.sessions, read.skipped, read.other_targets) == (2, 3, 1)
    said = read.describe()
    assert "3 unreadable files skipped" in said and "1 session of another target left out" in said


def test_no_folder_or_a_file_in_its_place_holds_nothing(tmp_path: Path) -> None:
    assert earlier_outputs(tmp_path / "missing", TARGET, 100).outputs == ()
    (tmp_path / "file").write_text("x")
    read = earlier_outputs(tmp_path / "file", TARGET, 100)
    assert read.outputs == () and read.describe().startswith("found no earlier outputs of this target in")


def test_reading_stops_at_its_bounds_on_files_and_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for day in range(1, 6):
        saved(tmp_path, f"2026-01-0{day}_x", (day, day))
    monkeypatch.setattr(recall, "RECALL_FILES", 2)
    read = earlier_outputs(tmp_path, TARGET, 1000)
    assert (
        read.sessions == 2 and read.stopped == "the newest 2 sessions" and "stopped at the newest 2" in read.describe()
    )
    monkeypatch.setattr(recall, "RECALL_FILES", 100)
    size = (tmp_path / "2026-01-05_x.jsonl").stat().st_size
    monkeypatch.setattr(recall, "RECALL_BYTES", int(size * 3.5))
    read = earlier_outputs(tmp_path, TARGET, 1000)
    assert read.sessions == 3 and read.stopped is not None and "MiB of sessions" in read.stopped


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("recall")
    path = saved(folder, "s", (1, 2, 3), (4, 5))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@settings(
    max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_whatever_a_file_holds_reading_gives_token_ids_or_counts_it(
    records: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    folder = tmp_path_factory.mktemp("fuzzed")
    changed: list[Any] = json.loads(json.dumps(records))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(changed) - 1))
        places = paths(changed[i])
        changed[i] = replace_at(changed[i], data.draw(st.sampled_from(places)), data.draw(JSON_VALUES))
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in changed)
    cut = data.draw(st.sampled_from([len(text), len(text) - 1, len(text) // 2]))
    (folder / "fuzzed.jsonl").write_text(text[:cut], encoding="utf-8")
    read = earlier_outputs(folder, TARGET, 1000)
    assert read.sessions + read.skipped + read.other_targets <= 1
    assert all(isinstance(t, int) and 0 <= t < 2**31 for o in read.outputs for t in o.token_ids)
