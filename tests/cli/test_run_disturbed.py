"""A speedup read from a run says when the machine's speed moved while it was measured, by the
one definition `specplay costs` uses (engine/disturbance.py): the summary line, `run --json` and
`specplay sessions`. The scripted backend's clock is the machine: quiet, or three times slower
for part of the target-only lane, as another process starting would make it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.render import json_line, summary
from specplay.cli.sessions import summarize
from specplay.engine.disturbance import DRIFT_LIMIT, TIMING_DRIFT, busy_reason, drift, grouped_drift
from specplay.store import load_session
from tests.support.disturbed import LANE_S, measured_lanes
from tests.support.prompts import CODE_PROMPT
from tests.support.session_events import write_session


def test_the_drift_is_costs_quartile_range_over_groups_of_steps() -> None:
    assert drift([10.0, 10.0, 10.0]) == 0.0 and drift([10.0]) == 0.0
    assert drift([10.0, 10.0, 20.0, 20.0]) == pytest.approx(10 / 15)
    # a spike inside a group is not a change of speed; a slow stretch of groups is
    assert grouped_drift([10.0, 30.0, 10.0] * 8) == 0.0
    assert grouped_drift([10.0] * 12 + [30.0] * 12) == pytest.approx((30 - 10) / 20)
    assert grouped_drift([10.0] * 5) is None  # one group: too few to say
    assert busy_reason(DRIFT_LIMIT, "x") is None and busy_reason(None, "x") is None
    assert "x moved by 16%" in (busy_reason(0.16, "x") or "")


def test_a_quiet_run_reads_its_speedup_plainly() -> None:
    main_lane, baseline = measured_lanes()
    assert main_lane.metrics[TIMING_DRIFT] == pytest.approx(0.0) and baseline.metrics[TIMING_DRIFT] == pytest.approx(0)
    line = summary(main_lane, baseline, speed_measured=True)
    assert "speedup" in line and "disturbed" not in line
    out = json.loads(json_line(main_lane, baseline))
    assert out["disturbed"] is False and out["disturbed_reason"] is None


def test_a_slow_phase_in_the_target_only_lane_is_said_where_the_speedup_is_read() -> None:
    """Nothing drafted (route none): a true speedup near 1, read far above it because the
    target-only lane ran slow for its second half."""
    main_lane, baseline = measured_lanes(slow_from_s=1.5 * LANE_S, slow_until_s=100.0)
    parts = summary(main_lane, baseline, speed_measured=True).split(" · ")
    speedup = float(next(p for p in parts if "speedup" in p).rsplit("speedup ", 1)[1].rstrip("x"))
    assert speedup > 1.5  # what a busy machine reads for no speculation at all
    assert parts[-1].startswith("disturbed: the target-only lane's step moved by ")
    assert parts[-1].endswith("the machine is busy; run again on a quieter machine")
    assert baseline.metrics[TIMING_DRIFT] > DRIFT_LIMIT and main_lane.metrics[TIMING_DRIFT] == pytest.approx(0)
    out = json.loads(json_line(main_lane, baseline))
    assert out["disturbed"] is True and out["disturbed_reason"] in parts[-1]
    # without a measured speed (remote servers) no speedup is read, and nothing is said of one
    assert "disturbed" not in summary(main_lane, baseline, speed_measured=False)


def test_a_slow_phase_in_the_speculative_lane_is_said_of_its_verify_passes() -> None:
    main_lane, baseline = measured_lanes(slow_from_s=0.5 * LANE_S, slow_until_s=LANE_S, route="near")
    line = summary(main_lane, baseline, speed_measured=True)
    assert "disturbed: the speculative lane's verify pass moved by " in line


def test_sessions_marks_a_disturbed_speedup_and_says_why_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, slow in (("quiet", (0.0, 0.0)), ("busy", (1.5 * LANE_S, 100.0))):
        main_lane, baseline = measured_lanes(*slow)
        write_session(tmp_path / name, {"speculative": main_lane.events, "target": baseline.events}, CODE_PROMPT)
    rows = {name: summarize(load_session(next((tmp_path / name).glob("*.jsonl")))) for name in ("quiet", "busy")}
    assert rows["quiet"]["disturbed_reason"] is None and rows["quiet"]["speedup"] is not None
    assert "the target-only lane's step moved by" in rows["busy"]["disturbed_reason"]
    for name, marked in (("quiet", False), ("busy", True)):
        capsys.readouterr()
        assert main(["sessions", "--sessions-dir", str(tmp_path / name)]) == 0
        (_header, line, *_key) = capsys.readouterr().out.splitlines()  # the key to the columns under it
        assert (f"{rows[name]['speedup']:.2f}x busy" in line) is marked
        assert main(["sessions", "--json", "--sessions-dir", str(tmp_path / name)]) == 0
        assert json.loads(capsys.readouterr().out)["disturbed_reason"] == rows[name]["disturbed_reason"]
