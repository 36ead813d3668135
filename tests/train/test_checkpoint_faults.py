"""Training checkpoints under faults: a kill at any point of a save leaves a state the next run
resumes from, a full disk is one line with nothing half-written left, and rotation touches only
specplay's own files inside --out (a checkpoint folder that is a link is refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import pytest

from specplay.cli import main
from specplay.errors import SpecplayError
from specplay.train.trainer import (
    CHECKPOINT_FILES,
    CHECKPOINT_STATE,
    load_checkpoint,
    recover_checkpoint,
    save_checkpoint,
)
from tests.support.tiny_models import TinyModels

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--batch-size", "2", "--seq-len", "16", "--rollout-tokens", "8", "--keep-worse"]
"""Quick settings whose few steps may leave a drafter a little worse: written anyway (these tests
are about checkpoints, not about what training achieves)."""


def _model(width: int = 8) -> tuple[nn.Module, optim.Optimizer]:
    model = nn.Linear(width, width)
    optimizer = optim.AdamW(learning_rate=1e-3)
    optimizer.init(model.trainable_parameters())
    mx.eval(model.parameters())
    return model, optimizer


def _step(directory: Path) -> int:
    model, optimizer = _model()
    return load_checkpoint(directory, model, optimizer)[0]


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "prompts.txt"
    data.write_text("\n\n".join(["def parse(path):", "The module provides", "class Reader:"]))
    return data


@pytest.mark.parametrize("state", ["old-only", "old-and-half-tmp", "new-and-half-old", "half-tmp"])
def test_every_state_a_kill_leaves_is_recovered(state: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint"
    tmp, old = tmp_path / "checkpoint.tmp", tmp_path / "checkpoint.old"
    model, optimizer = _model()
    save_checkpoint(ckpt, model, optimizer, 1, {})
    if state in ("old-only", "old-and-half-tmp"):  # killed between setting the old one aside and the rename
        ckpt.rename(old)
        expected = 1
    if state in ("old-and-half-tmp", "half-tmp"):  # killed while writing the new one
        tmp.mkdir()
        (tmp / CHECKPOINT_FILES[0]).write_bytes(b"half")
        expected = 1
    if state == "new-and-half-old":  # killed while removing the old one
        save_checkpoint(ckpt, model, optimizer, 2, {})
        old.mkdir()
        (old / CHECKPOINT_STATE).write_text("{}")
        expected = 2
    recover_checkpoint(ckpt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert _step(ckpt) == expected
    save_checkpoint(ckpt, model, optimizer, 3, {})
    assert _step(ckpt) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_distill_resumes_past_a_leftover_old_checkpoint(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--out", str(out)]
    assert main([*args, "--steps", "2", "--draft", str(tiny.near)]) == 0
    state = out / "work" / "checkpoint" / CHECKPOINT_STATE
    state.write_text(json.dumps(json.loads(state.read_text()) | {"step": 1}))  # one step left to train
    old = out / "work" / "checkpoint.old"
    old.mkdir()  # a kill while the previous checkpoint was being removed
    (old / CHECKPOINT_STATE).write_text("{}")
    capsys.readouterr()
    assert main([*args, "--steps", "2", "--draft", str(tiny.near)]) == 0, capsys.readouterr().err
    assert not old.exists() and _step(out / "work" / "checkpoint") == 2


def test_a_checkpoint_folder_that_is_a_link_is_refused_and_its_target_kept(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    users = tmp_path / "users-folder"
    users.mkdir()
    (users / "thesis.tex").write_text("the user's own")
    (users / CHECKPOINT_STATE).write_text('{"step": 1}')
    out = tmp_path / "out"
    (out / "work").mkdir(parents=True)
    (out / "work" / "checkpoint").symlink_to(users)
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--out", str(out)]
    assert main([*args, "--steps", "2", "--draft", str(tiny.near)]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and "checkpoint is not a checkpoint folder specplay made" in last, err
    assert sorted(p.name for p in users.iterdir()) == [CHECKPOINT_STATE, "thesis.tex"]
    assert (users / "thesis.tex").read_text() == "the user's own"


def test_rotation_never_deletes_files_it_did_not_write(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint"
    model, optimizer = _model()
    save_checkpoint(ckpt, model, optimizer, 1, {})
    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "notes.txt").write_text("mine")
    with pytest.raises(SpecplayError, match=r"holds notes\.txt, which specplay did not write"):
        save_checkpoint(ckpt, model, optimizer, 2, {})
    assert (tmp_path / "checkpoint.old" / "notes.txt").read_text() == "mine"


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails as on a full disk
import mlx.core as mx, mlx.nn as nn, mlx.optimizers as optim
from specplay.errors import SpecplayError
from specplay.train.trainer import save_checkpoint
model = nn.Linear(512, 512)  # 1 MB of float32 weights
optimizer = optim.AdamW(learning_rate=1e-3)
optimizer.init(model.trainable_parameters())
mx.eval(model.parameters())
directory = Path(sys.argv[1])
save_checkpoint(directory, model, optimizer, 1, {})
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    save_checkpoint(directory, model, optimizer, 2, {})
except SpecplayError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
"""


def test_a_full_disk_while_saving_is_one_line_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    ckpt = tmp_path / "work" / "checkpoint"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(ckpt)], capture_output=True, text=True, env=env, timeout=120
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert f"cannot write the training checkpoint in {ckpt}" in lines[0] and "free some disk space" in lines[0]
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["checkpoint"]  # no .tmp, no .old
    assert _step(ckpt) == 1  # the last checkpoint is kept whole


DISTILL_ON_A_FULL_DISK = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv = ["specplay", *sys.argv[2:]]
runpy.run_module("specplay", run_name="__main__")
"""


@pytest.mark.parametrize(
    "limit, start, what",
    [
        (1_000, "draft", "the target's answers"),
        (20_000, "draft", "the training checkpoint"),
        (1_000, "exit-head", "the target's answers"),
        (20_000, "exit-head", "the target's answers"),
    ],
)
def test_distill_on_a_full_disk_is_one_line_and_leaves_nothing_half_written(
    limit: int, start: str, what: str, tiny: TinyModels, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    drafter = ["--draft", str(tiny.near)] if start == "draft" else ["--exit-head", "layers=1"]
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--steps", "2"]
    command = [sys.executable, "-c", DISTILL_ON_A_FULL_DISK, str(limit), *args, *drafter, "--out", str(out)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert last.startswith(f"specplay: error: cannot write {what} in ") and "free some disk space" in last, last
    left = [str(p.relative_to(out)) for p in out.rglob("*")]
    assert not [p for p in left if "tmp" in p or p.endswith(".old")], left


def test_a_finished_run_with_other_settings_is_not_offered_a_resume(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same --out after a run that finished: with its settings the command completes again;
    with others there is nothing to resume, and the line says what to do instead."""
    out = tmp_path / "out"
    args = ["distill", "--target", str(tiny.target), "--data", str(_data(tmp_path)), *FAST, "--out", str(out)]
    assert main([*args, "--steps", "2", "--draft", str(tiny.near)]) == 0
    capsys.readouterr()
    assert main([*args, "--steps", "2", "--draft", str(tiny.near), "--lr", "0.01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "resume" not in err and f"{out / 'work' / 'checkpoint'} is of a finished run with other settings" in err
    assert "train into another --out, or remove that folder to train there again" in err
