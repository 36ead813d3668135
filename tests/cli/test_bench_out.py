"""`bench --out` replaces only the report files specplay recorded writing there, and says so before
it measures anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.bench import REPORT_FILES
from specplay.files.outputs import OUTPUTS_RECORD, claim_outputs
from tests.support.tiny_models import TinyModels


@pytest.mark.parametrize("own", [["report.md"], ["results.csv", "results.json"], ["speedup_vs_k.png"]])
def test_bench_never_replaces_a_users_own_report(
    own: list[str], tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    for name in own:
        (out / name).write_text("the user's own")
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    assert main(["bench", *models, "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "which specplay did not write" in err and all(n in err for n in own), err
    assert all((out / name).read_text() == "the user's own" for name in own)
    assert sorted(p.name for p in out.iterdir()) == sorted(own)  # refused before measuring anything


def test_a_report_specplay_wrote_is_replaced(tiny: TinyModels, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    claim_outputs(out, REPORT_FILES, "fix")  # as a finished bench leaves it
    (out / "report.md").write_text("an old report")
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    args = ["bench", *models, "--quick", "--out", str(out), "--max-tokens", "4", "--repeats", "3"]
    args += ["--per-category", "1", "--temperatures", "0"]
    assert main(args) == 0
    assert (out / "report.md").read_text() != "an old report" and (out / OUTPUTS_RECORD).is_file()


def test_the_measurements_are_written_before_the_report(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write that fails late (a full disk; here a folder where report.md goes) keeps what was
    measured: results.json and results.csv are written first, the report last."""
    out = tmp_path / "reports"
    claim_outputs(out, REPORT_FILES, "fix")  # as a finished bench leaves it
    (out / "report.md").mkdir()
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    args = ["bench", *models, "--quick", "--out", str(out), "--max-tokens", "4", "--repeats", "3"]
    args += ["--per-category", "1", "--temperatures", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("specplay: error: ") and "report.md is a folder" in err
    assert "Traceback" not in err
    assert json.loads((out / "results.json").read_text())["rows"]
    assert (out / "results.csv").read_text().count("\n") > 1
