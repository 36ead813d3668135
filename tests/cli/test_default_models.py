"""One default model set for every command that runs models (model_sets.default_set: SmolLM2 once
fetched, else the demo models), help texts that say so and which it is now, and output that names
the models a command ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.cli import build_parser, main
from specplay.cli.configure import given, run_config
from specplay.config.demo import demo_model_paths
from tests.support.catalog_files import fetched_smollm2
from tests.support.real_models import models_cache
from tests.support.tiny_models import TinyModels

COMMANDS = ("run", "tui", "costs", "bench", "fidelity")
"""The commands with models and defaults for them."""
RULE = (
    "default: SmolLM2-135M-Instruct once fetched (`specplay fetch smollm2`), "
    "else the demo models that ship with specplay"
)


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_says_the_rule_and_which_set_it_gives_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in COMMANDS:
        assert f"models ({RULE}; here now: the demo models)" in _help(command, capsys), command
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path))
    fetched_smollm2(tmp_path)
    for command in COMMANDS:
        assert f"models ({RULE}; here now: SmolLM2-135M-Instruct)" in _help(command, capsys), command
    assert "the default models, as every command" in _help("bench", capsys)  # --quick among them


def test_every_command_opens_the_fetched_model_when_none_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With SmolLM2 fetched (here a file of its size that is no GGUF), each command goes for it:
    `bench --quick` too, which once ran the demo models whatever was fetched."""
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path / "cache"))
    fake = fetched_smollm2(tmp_path / "cache")
    prompt = ["--prompt", "def f(x):"]
    commands = {
        "run": ["run", *prompt],
        "costs": ["costs", *prompt],
        "bench": ["bench", "--quick", "--out", str(tmp_path / "bench")],
        "fidelity": ["fidelity", *prompt, "--sessions-dir", str(tmp_path / "sessions")],
    }
    for argv in commands.values():
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{fake} is not a GGUF file" in err and err.count("\n") == 1, (argv, err)
    # the playground's configuration, as `specplay tui` builds it
    assert run_config(given(build_parser().parse_args(["tui"]))).target.location == str(fake)
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path / "empty"))
    assert run_config(given(build_parser().parse_args(["tui"]))).target.location == str(demo_model_paths()[0])


def test_run_names_the_models_it_ran_in_text_and_json(tiny: TinyModels, capsys: pytest.CaptureFixture[str]) -> None:
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}", "--draft", "look=prompt-lookup"]
    named = f"target {tiny.target.name}; drafters near, look (prompt-lookup)"
    args = [*models, "--prompt", "def f(x):", "--raw", "--max-tokens", "4"]
    capsys.readouterr()
    assert main(["run", *args]) == 0
    assert f"models: {named}" in capsys.readouterr().out.splitlines()[:3]
    assert main(["run", *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"] == named
    assert main(["run", *args, "--mode", "target"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"models: {named}"


def test_fidelity_names_the_models_it_ran(tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--target", str(tiny.target), "--draft", f"near={tiny.near}", "--prompt", "def f(x):", "--raw"]
    args += ["--max-tokens", "4", "--samples", "1", "--budgets", "0", "--sessions-dir", str(tmp_path)]
    capsys.readouterr()
    assert main(["fidelity", *args]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"models: target {tiny.target.name}; drafters near"


def test_smollm2_fetched_is_what_a_run_without_model_flags_runs_and_names(
    smollm2: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(models_cache()))
    capsys.readouterr()
    assert main(["run", "--prompt", "Say hi.", "--max-tokens", "4", "--mode", "target"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "models: target SmolLM2-135M-Instruct; drafters lookup (prompt-lookup), exit (early-exit)"
