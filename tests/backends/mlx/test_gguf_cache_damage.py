"""A converted folder damaged in the cache (a file cut short, edited, added or removed) is never
served: the cache checks it against what its conversion wrote and converts again."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specplay.backends.mlx.gguf import cache as gguf_cache
from specplay.backends.mlx.gguf import converted_folder, default_cache_dir
from specplay.backends.mlx.loading import load_model
from tests.support.gguf_files import write_gguf
from tests.support.tiny_models import TinyModels


def _truncate_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _flip_a_weight_byte(folder: Path) -> None:
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))


def _edit_config(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"rope_theta": 123.0}))


def _add_generation_config(folder: Path) -> None:
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))


def _remove_tokenizer_config(folder: Path) -> None:
    (folder / "tokenizer_config.json").unlink()


def _marker_of_an_older_converter(folder: Path) -> None:
    marker = json.loads((folder / gguf_cache.MARKER).read_text())
    del marker["files"]
    (folder / gguf_cache.MARKER).write_text(json.dumps(marker))


@pytest.mark.parametrize(
    "damage",
    [
        _truncate_weights,
        _flip_a_weight_byte,
        _edit_config,
        _add_generation_config,
        _remove_tokenizer_config,
        _marker_of_an_older_converter,
    ],
)
def test_a_damaged_conversion_is_rebuilt_not_served(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path], None]
) -> None:
    written = write_gguf(tiny.target, tmp_path / "m.gguf")
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path / "cache"))
    cache = default_cache_dir()
    folder = converted_folder(written.path, cache)
    files = {f.name: f.read_bytes() for f in folder.iterdir()}
    damage(folder)
    assert converted_folder(written.path, cache) == folder
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == files  # as the conversion wrote it
    assert sorted(p.name for p in cache.iterdir()) == sorted([folder.name, gguf_cache.INDEX])  # nothing aside
    assert load_model("target", str(written.path)).path == folder


def test_an_intact_conversion_is_served_without_converting_again(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = write_gguf(tiny.target, tmp_path / "m.gguf")
    folder = converted_folder(written.path, tmp_path / "cache")
    marker = json.loads((folder / gguf_cache.MARKER).read_text())
    assert set(marker["files"]) == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}

    def fail(*_: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_cache, "_temp_name", fail)  # every conversion starts with a temporary name
    assert converted_folder(written.path, tmp_path / "cache") == folder
