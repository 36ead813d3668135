"""What distill refuses before or instead of writing: training that diverges, shapes too large to
build, and output folders holding files specplay did not write."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.cli.distill import SHAPE_LIMITS
from specplay.errors import SpecplayError
from specplay.files.outputs import OUTPUTS_RECORD, check_outputs, claim_outputs
from tests.support.tiny_models import TinyModels

FAST = ["--steps", "3", "--batch-size", "2", "--seq-len", "16", "--rollout-tokens", "16", "--keep-worse"]


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "prompts.txt"
    data.write_text("\n\n".join(["def parse(path):", "The module provides", "class Reader:", "It returns"]))
    return data


@pytest.mark.parametrize(
    "start", [["--draft", "near"], ["--new-drafter", "layers=1,width=64"], ["--exit-head", "layers=1"]]
)
@pytest.mark.parametrize("lr", ["1e20", "1e30"])
def test_training_that_diverges_stops_and_writes_no_model(
    start: list[str], lr: str, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = [str(tiny.near) if arg == "near" else arg for arg in start]
    out = tmp_path / "out"
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--lr", lr]
    assert main([*args, *start, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("specplay: error: training diverged at step ") and "no model was written" in err, err
    written = {p.name for p in out.iterdir()}
    assert written <= {"work", OUTPUTS_RECORD}, written  # no weights, config, tokenizer or distill.json


@pytest.mark.parametrize(
    "flag, shape, message",
    [
        ("--new-drafter", "layers=1,width=100000000", f"width is at most {SHAPE_LIMITS['width']}"),
        ("--new-drafter", "layers=100000000,width=64", f"layers is at most {SHAPE_LIMITS['layers']}"),
        ("--new-drafter", "layers=1,width=64,heads=" + "9" * 5000, "whole numbers of 1 or more"),
        ("--new-drafter", f"layers={SHAPE_LIMITS['layers']},width={SHAPE_LIMITS['width']}", "parameters, more than"),
        ("--exit-head", "layers=1,mlp=100000000000", f"mlp is at most {SHAPE_LIMITS['mlp']}"),
    ],
    ids=["width", "layers", "digits", "parameters", "mlp"],
)
def test_shapes_are_bounded_before_anything_is_built(
    flag: str, shape: str, message: str, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST]
    assert main([*args, flag, shape, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("specplay: error: ") and message in err and len(err) < 400, err
    assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.parametrize("own", [["model.safetensors", "tokenizer.json"], ["exit_head.json"], ["distill.json"]])
def test_distill_never_replaces_a_users_own_files(
    own: list[str], tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    for name in own:
        (out / name).write_text("the user's own")
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--out", str(out)]
    for start in (["--draft", str(tiny.near)], ["--exit-head", "layers=1"]):
        assert main([*args, *start]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "which specplay did not write" in err and own[0] in err, err
    assert all((out / name).read_text() == "the user's own" for name in own)


def test_files_specplay_recorded_are_replaced_and_no_others(tmp_path: Path) -> None:
    out = tmp_path / "out"
    claim_outputs(out, ["model.safetensors", "config.json"], "fix")
    (out / "model.safetensors").write_text("specplay's")
    check_outputs(out, ["model.safetensors", "config.json"], "fix")  # its own: replaced freely
    (out / "tokenizer.json").write_text("the user's")
    with pytest.raises(SpecplayError, match=re.escape("holds tokenizer.json, which specplay did not write; fix")):
        claim_outputs(out, ["model.safetensors", "tokenizer.json"], "fix")
    assert json.loads((out / OUTPUTS_RECORD).read_text())["files"] == ["config.json", "model.safetensors"]
    (out / OUTPUTS_RECORD).write_text("[" * 100_000)  # a damaged record vouches for nothing
    with pytest.raises(
        SpecplayError, match=re.escape("model.safetensors, tokenizer.json, which specplay did not write")
    ):
        check_outputs(out, ["model.safetensors", "tokenizer.json"], "fix")
