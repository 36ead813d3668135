"""specplay never writes through a link in an output folder (`bench --out`, `distill --out`): the
record of outputs or any file it would write, as a link to a user's file, is refused in one line
naming the link, and the user's file is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.bench import REPORT_FILES
from specplay.errors import SpecplayError
from specplay.files.outputs import OUTPUTS_RECORD, check_outputs, claim_outputs, write_in_folder
from tests.support.tiny_models import TinyModels

FAST = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--rollout-tokens", "8", "--keep-worse"]
MINE = "the user's own"


def _linked_out(tmp_path: Path, name: str, recorded: list[str]) -> tuple[Path, Path]:
    """An output folder whose `name` links to a user's file; `recorded` as specplay's own."""
    out, users = tmp_path / "out", tmp_path / "users-file"
    users.write_text(MINE)
    if recorded:
        claim_outputs(out, recorded, "fix")
    out.mkdir(exist_ok=True)
    (out / name).symlink_to(users)
    return out, users


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "prompts.txt"
    data.write_text("\n\n".join(["def parse(path):", "The module provides", "class Reader:"]))
    return data


@pytest.mark.parametrize("name", [OUTPUTS_RECORD, "report.md", "speedup_vs_k.png"])
def test_bench_refuses_a_link_in_its_out_folder(
    name: str, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, users = _linked_out(tmp_path, name, [] if name == OUTPUTS_RECORD else list(REPORT_FILES))
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    assert main(["bench", *models, "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / name} is a symbolic link" in err, err
    assert users.read_text() == MINE and (out / name).is_symlink()


@pytest.mark.parametrize("name", [OUTPUTS_RECORD, "model.safetensors", "tokenizer.json", "distill.json"])
def test_distill_refuses_a_link_in_its_out_folder(
    name: str, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = [] if name == OUTPUTS_RECORD else ["model.safetensors", "tokenizer.json", "distill.json", "config.json"]
    out, users = _linked_out(tmp_path, name, recorded)
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--out", str(out)]
    assert main([*args, "--draft", str(tiny.near)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / name} is a symbolic link" in err, err
    assert users.read_text() == MINE and (out / name).is_symlink()


def test_distill_keeps_its_work_inside_out(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text(MINE)
    out = tmp_path / "out"
    out.mkdir()
    (out / "work").symlink_to(elsewhere)
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--out", str(out)]
    assert main([*args, "--draft", str(tiny.near)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / 'work'} is a symbolic link" in err, err
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]


def test_the_shared_writers_refuse_links(tmp_path: Path) -> None:
    out, users = _linked_out(tmp_path, "report.md", ["report.md"])
    with pytest.raises(SpecplayError, match=r"report\.md is a symbolic link"):
        check_outputs(out, ["report.md"], "fix")
    with pytest.raises(SpecplayError, match=r"report\.md is a symbolic link"):
        write_in_folder(out, "report.md", "new", "fix")
    (out / OUTPUTS_RECORD).unlink()
    (out / OUTPUTS_RECORD).symlink_to(users)
    with pytest.raises(SpecplayError, match="is a symbolic link"):
        claim_outputs(out, ["results.csv"], "fix")
    assert users.read_text() == MINE
