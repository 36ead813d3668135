"""The demo models shipped inside the package: intact, loadable, and what specplay uses when no
models are named."""

from __future__ import annotations

import hashlib
import json

import pytest

from specplay.cli import main
from specplay.config.demo import DEMO_DIR, DEMO_DRAFTERS, demo_model_paths


def test_every_shipped_file_matches_its_recorded_checksum() -> None:
    manifest = json.loads((DEMO_DIR / "manifest.json").read_text())
    shipped = {
        f"{folder.name}/{file.name}"
        for folder in DEMO_DIR.iterdir()
        if folder.is_dir()
        for file in folder.iterdir()
        if file.is_file()
    }
    assert shipped == set(manifest["files"])
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((DEMO_DIR / name).read_bytes()).hexdigest() == digest, name


def test_the_demo_models_fit_the_size_budget() -> None:
    total_bytes = sum(f.stat().st_size for f in DEMO_DIR.rglob("*") if f.is_file())
    assert total_bytes <= 40 * 2**20


def test_they_load_with_mlx_lm_share_one_tokenizer_and_have_no_chat_template() -> None:
    import mlx.core as mx
    from mlx_lm import load

    target_path, drafters = demo_model_paths()
    target, tokenizer = load(str(target_path))
    assert not tokenizer.has_chat_template
    vocab = tokenizer.get_vocab()
    for path in drafters.values():
        _, drafter_tokenizer = load(str(path))
        assert drafter_tokenizer.get_vocab() == vocab
    logits = target(mx.array([tokenizer.encode("def main():\n")]))
    assert logits.shape[-1] >= len(vocab)


def test_no_model_flags_means_the_demo_models_routed_by_content(capsys: pytest.CaptureFixture[str]) -> None:
    routes = {}
    for kind, prompt in (
        ("code", "def read_config(path):\n    with open(path) as f:\n"),
        ("prose", "The history of the library is a story of many small changes made"),
    ):
        code = main(["run", "--prompt", prompt, "--max-tokens", "6", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        record = json.loads(out.splitlines()[-1])
        routes[kind] = record["route"]
        assert len(record["token_ids"]) == 6
    assert routes == {"code": DEMO_DRAFTERS[0], "prose": "prose"}


def test_a_drafter_without_a_target_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--draft", "x=/nowhere", "--prompt", "hi"])
    _, err = capsys.readouterr()
    assert code == 2 and "--target" in err and "demo models" in err
