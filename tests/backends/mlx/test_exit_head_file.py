"""A hostile exit_head.json (`--draft e=early-exit:layers=2,head=DIR`): each fault is one line
naming the file, the field and the fix, and the run fails; a sound head still drafts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import specplay
from specplay.backends.mlx.early_exit import HEAD_CONFIG, HEAD_WEIGHTS, ExitHead, save_exit_head
from specplay.cli import main

DEMO_TARGET = Path(specplay.__file__).parent / "models" / "target"
DEMO_WIDTH = 384


@pytest.fixture(scope="module")
def sound_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("head")
    save_exit_head(folder, ExitHead(DEMO_WIDTH), layers=2)
    return folder


def _head(folder: Path, sound: Path, fields: dict[str, Any]) -> Path:
    """A copy of the sound head whose exit_head.json has `fields` replaced."""
    folder.mkdir()
    (folder / HEAD_WEIGHTS).write_bytes((sound / HEAD_WEIGHTS).read_bytes())
    config = json.loads((sound / HEAD_CONFIG).read_text(encoding="utf-8"))
    (folder / HEAD_CONFIG).write_text(json.dumps(config | fields), encoding="utf-8")
    return folder


def _run(head: Path, sessions: Path) -> int:
    draft = f"e=early-exit:layers=2,head={head}"
    args = ["--prompt", "def f(", "--max-tokens", "3", "--sessions-dir", str(sessions)]
    return main(["run", "--target", str(DEMO_TARGET), "--draft", draft, *args])


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"mlp_size": "abc"}, "its mlp_size is 'abc', not a whole number from 0 to 65536"),
        ({"mlp_size": 2**40}, "its mlp_size is 1099511627776, not a whole number from 0 to 65536"),
        ({"mlp_size": -5}, "its mlp_size is -5, not a whole number from 0 to 65536"),
        ({"target": [1, 2]}, "its target is a list, not an object"),
        ({"weights_sha256": 123}, "its weights_sha256 is 123, not a sha256"),
        ({"target": {"weights_sha256": 7}}, "its target's weights_sha256 is 7, not a sha256"),
        ({"layers": True}, "its layers is True, not a whole number"),
        ({"hidden_size": "384"}, "its hidden_size is '384', not a whole number"),
        ({"version": "2"}, "its version is not a whole number"),
        ({"version": 9}, "exit_head.json is of version 9, newer than this specplay reads; upgrade specplay"),
    ],
)
def test_each_fault_of_the_head_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sound_head: Path, fields: dict[str, Any], named: str
) -> None:
    head = _head(tmp_path / "head", sound_head, fields)
    assert _run(head, tmp_path / "sessions") != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and str(head) in err and "Traceback" not in err, err
    assert "version 9" in named or "specplay distill --exit-head" in err  # the fix


def test_a_head_file_that_is_not_json_or_too_deep_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sound_head: Path
) -> None:
    for name, text in (("torn", '{"format": "specplay-exit-head", "lay'), ("deep", "[" * 100_000)):
        head = _head(tmp_path / name, sound_head, {})
        (head / HEAD_CONFIG).write_text(text, encoding="utf-8")
        assert _run(head, tmp_path / "sessions") != 0
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(head) in err and "Traceback" not in err, err


def test_a_sound_head_still_drafts(tmp_path: Path, sound_head: Path) -> None:
    assert _run(_head(tmp_path / "head", sound_head, {}), tmp_path / "sessions") == 0
