"""A draft tree's width is shown where a run is summed up: `run`'s summary line and the
`specplay sessions` listing tell a width-2 run from a chain's."""

from __future__ import annotations

from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.render import summary
from specplay.store import LaneRecord, load_session
from tests.support.session_events import (
    same_as_rounds,
    speculative_events,
    target_events,
    write_session,
    write_tree_session,
)


def test_run_summary_names_the_tree_width_and_its_nodes(tmp_path: Path) -> None:
    session = load_session(write_tree_session(tmp_path))
    assert session.baseline is not None
    parts = summary(session.main, session.baseline, speed_measured=True).split(" · ")
    assert parts[2:4] == ["k 3 fixed", "tree width 2, 6 nodes at most"]
    chain = LaneRecord("speculative")
    for event in speculative_events():
        chain.add(event)
    assert not any("width" in part for part in summary(chain, None, speed_measured=True).split(" · "))


def test_sessions_lists_a_tree_sessions_width_beside_a_chains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = write_tree_session(tmp_path).stem
    chain = write_session(tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "k=3 fixed width=2 nodes=6 " in lines[tree]
    assert "width" not in lines[chain.stem] and "k=" in lines[chain.stem]
    assert main(["sessions", "--json", "--sessions-dir", str(tmp_path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if tree in line]
    assert '"width": 2' in rows[0] and '"tree_nodes": 6' in rows[0]
