"""Times a saved session may hold that no division takes (zero, absent or negative draft, verify,
overhead and step times; a lane whose only round committed nothing): every reader of the session
still reads it, and shows no number it cannot compute."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specplay.cli import main
from specplay.engine.events import Token
from specplay.engine.speedup import predict
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

ROUND_TIMES = ("draft_ms", "verify_ms", "overhead_ms")


def _edit_records(path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """The session at `path` with `edit` applied to each of its event records' data."""
    lines = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        record = json.loads(line) if line else None
        if record is not None and record["type"] == "event":
            edit(record)
            line = json.dumps(record)
        lines.append(line)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _done_times(value: float | None) -> Callable[[dict[str, Any]], None]:
    """Sets the speculative lane's done metrics' round times to `value` (None: leaves them out)."""

    def edit(record: dict[str, Any]) -> None:
        if record["kind"] == "done" and record["lane"] == "speculative":
            metrics = record["data"]["metrics"]
            for name in ROUND_TIMES:
                metrics.pop(name, None)
                if value is not None:
                    metrics[name] = value

    return edit


def _every_time(value: float) -> Callable[[dict[str, Any]], None]:
    """Sets every round's and step's time to `value`."""

    def edit(record: dict[str, Any]) -> None:
        names = ROUND_TIMES if record["kind"] == "round" else ("step_ms",) if record["kind"] == "step" else ()
        for name in names:
            record["data"][name] = value

    return edit


def _session(directory: Path, case: str) -> Path:
    empty = case == "round without tokens"  # and a target-only lane with no steps: no chart has a scale
    rounds: list[list[Token]] = [[]] if empty else ROUNDS
    target = [] if empty else same_as_rounds()
    lanes = {"speculative": speculative_events(rounds=rounds), "target": target_events(target)}
    path = write_session(directory, lanes)
    edits = {
        "zero done times": _done_times(0.0),
        "absent done times": _done_times(None),
        "negative done times": _done_times(-2.0),  # a draft time that makes a round cost 0 target steps
        "zero round and step times": _every_time(0.0),
        "negative round and step times": _every_time(-1.0),
    }
    return _edit_records(path, edits[case]) if case in edits else path


CASES = [
    "zero done times",
    "absent done times",
    "negative done times",
    "zero round and step times",
    "negative round and step times",
    "round without tokens",
]


@pytest.mark.parametrize("case", CASES)
def test_every_reader_reads_a_session_with_times_no_division_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    path = _session(tmp_path, case)
    for args in (
        ["export", str(path)],
        ["export", str(path), "--format", "html"],
        ["diff", str(path)],
        ["sessions", "--sessions-dir", str(tmp_path)],
    ):
        assert main(args) == 0, (case, args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and err == "", err


def test_a_round_that_costs_nothing_predicts_no_speedup() -> None:
    """A round's cost is its denominator: zero (or less) is no measurement, not an infinite speedup."""
    metrics = {"num_spec_steps": 2, "num_draft_tokens": 4, "num_accepted_draft_tokens": 3, "num_judged_draft_tokens": 4}
    assert predict(metrics | dict.fromkeys(ROUND_TIMES, 0.0), 1.0).costed_speedup is None
    assert predict(metrics | {"draft_ms": -2.0}, 1.0).speedup is None
    costed = predict(metrics | {"draft_ms": 2.0, "verify_ms": 2.0, "overhead_ms": 0.0}, 1.0).costed_speedup
    assert costed is not None and costed > 0
