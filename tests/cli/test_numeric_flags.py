"""Every numeric flag of every command, at 0, -1, NaN, infinity and a huge value: one line of error
or a configuration that reaches the models, never a traceback. (What happens after the models
load is tested by the commands' own tests; here the run stops where model work would begin.)"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from specplay import backends
from specplay.cli import bench, build_parser, costs, fidelity, main, run
from tests.support.tiny_models import TinyModels

VALUES = ("0", "-1", "nan", "inf", "1e12", str(10**12))


class ReachedModels(Exception):
    """The configuration passed every check; the command was about to load models."""


def _numeric_flags(command: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return [
        a.option_strings[-1]
        for a in sub._actions
        if a.option_strings and (a.type in (int, float) or a.dest in ("temperatures", "budgets"))
    ]


@pytest.fixture
def stop_at_models(monkeypatch: pytest.MonkeyPatch) -> None:
    def reached(*args: object, **kwargs: object) -> None:
        raise ReachedModels

    for module in (run, bench, costs, fidelity):
        monkeypatch.setattr(module, "open_stream", reached)
    monkeypatch.setattr(backends, "open_stream", reached)
    monkeypatch.setattr("specplay.ui.app.PlaygroundApp.run", reached)
    monkeypatch.setattr("specplay.cli.tui.terminal_problem", lambda: None)  # as if in a terminal
    monkeypatch.setattr("specplay.backends.mlx.loading.load_model", reached)


def _bases(tiny: TinyModels, tmp_path: Path) -> dict[str, list[list[str]]]:
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}"]
    servers = ["--backend", "vllm", "--target-url", "http://127.0.0.1:9", "--draft-url", "near=http://127.0.0.1:9"]
    data = tmp_path / "data.txt"
    data.write_text("a prompt\n")
    return {
        "run": [[*models, "--prompt", "x", "--max-tokens", "2"], [*servers, "--prompt", "x"]],
        "tui": [models, servers],
        "bench": [[*models, "--quick", "--out", str(tmp_path / "bench")]],
        "costs": [[*models, "--prompt", "x"]],
        "fidelity": [[*models, "--prompt", "x"], [*servers, "--prompt", "x"]],
        "distill": [[*models[:2], "--draft", str(tiny.near), "--data", str(data), "--out", str(tmp_path / "out")]],
        "vllm-launch": [["--target", "some/model", "--draft", "some/drafter"]],
    }


@pytest.mark.parametrize("command", ["run", "tui", "bench", "costs", "fidelity", "distill", "vllm-launch"])
def test_numeric_flags_fail_in_one_line_or_reach_the_models(
    command: str,
    tiny: TinyModels,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stop_at_models: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # sessions and reports of valid runs land here
    flags = _numeric_flags(command)
    assert flags, command
    outcomes: dict[str, str] = {}
    for base in _bases(tiny, tmp_path)[command]:
        for flag in flags:
            for value in VALUES:
                try:
                    code = main([command, *base, flag, value])
                except ReachedModels:
                    outcomes[f"{flag} {value}"] = "valid"
                    continue
                except SystemExit as exit:  # argparse refusing a value of the wrong type
                    code = exit.code  # type: ignore[assignment]
                err = capsys.readouterr().err
                if code == 0:  # a command that finished without models (vllm-launch prints)
                    outcomes[f"{flag} {value}"] = "valid"
                    continue
                assert code == 2, (flag, value, code, err)
                assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err, (flag, value, err)
                outcomes[f"{flag} {value}"] = "refused"
    # The classic traps are refused whatever the command: NaN and infinity are never numbers here.
    for flag in flags:
        for value in ("nan", "inf"):
            assert outcomes[f"{flag} {value}"] == "refused", (command, flag, value)


def test_a_vanishing_temperature_samples_like_greedy_and_writes_no_nan(
    tiny: TinyModels, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    common = ["run", "--target", str(tiny.target), "--draft", f"near={tiny.near}", "--prompt", "def f(", "--raw"]
    common += ["--max-tokens", "12", "--ignore-eos", "--json"]
    assert main([*common, "--temperature", "0"]) == 0
    greedy = json.loads(capsys.readouterr().out)
    for budget in ("0", "0.5"):  # with a budget, greedy output is random (README): only numbers are checked
        assert main([*common, "--temperature", "1e-30", "--tv", budget]) == 0
        out = capsys.readouterr().out
        tiny_t = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON output"))
        assert len(tiny_t["token_ids"]) == 12 and tiny_t["metrics"]["tv_spent"] is not None
        if budget == "0":
            assert tiny_t["token_ids"] == greedy["token_ids"]


def test_a_drafter_with_nan_weights_ends_the_run_in_one_line(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import mlx.core as mx

    from specplay.store import load_session

    broken = tmp_path / "nan-drafter"
    broken.mkdir()
    for file in tiny.near.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    weights = mx.load(str(broken / "model.safetensors"))
    mx.save_safetensors(str(broken / "model.safetensors"), {k: v * float("nan") for k, v in weights.items()})
    args = ["run", "--target", str(tiny.target), "--draft", f"nan={broken}", "--prompt", "x", "--max-tokens", "8"]
    # Greedy, its argmax is some token the target judges like any other: the run stays lossless.
    assert main([*args, "--temperature", "0", "--json", "--ignore-eos"]) == 0
    assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 8
    # Sampled, its distribution is NaN: the run ends in one line, its session kept and readable.
    assert main([*args, "--temperature", "1", "--save", "--sessions-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "drafter 'nan' gave probabilities that are not numbers" in err, err
    (session,) = (tmp_path / "s").glob("*.jsonl")
    assert not load_session(session).complete
    # One model alone: its NaN logits end the run in one line too, greedy or sampled.
    for temperature in ("0", "1"):
        assert main([*args, "--mode", "draft", "--route", "nan", "--temperature", temperature]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "drafter 'nan' gave logits that are not numbers" in err, err
    target_only = ["run", "--target", str(broken), "--mode", "target", "--prompt", "x", "--max-tokens", "8"]
    assert main(target_only) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the target gave logits that are not numbers" in err, err


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), -0.01, 1.01])
def test_a_probability_that_is_no_number_in_0_1_ends_the_round(bad: float) -> None:
    from specplay.engine.round import check_numbers
    from specplay.engine.tree import VerifiedDraft, chain_verified
    from specplay.errors import ModelError

    def verified(p_target: list[float], p_draft: list[float]) -> VerifiedDraft:
        return chain_verified(
            drafted=[5, 6, 7],
            p_target=p_target,
            p_draft=p_draft,
            tv_distance=[0.0] * 3,
            target_argmax=[5, 6, 7],
            corrections=[5, 6, 7],
            bonus=8,
        )

    check_numbers(verified([0.0, 0.5, 1.0], [1.0, 0.25, 0.0]), "near")
    nothing = chain_verified(
        drafted=[], p_target=[], p_draft=[], tv_distance=[], target_argmax=[], corrections=[], bonus=8
    )
    check_numbers(nothing, "near")  # nothing drafted
    for position in range(3):
        values = [0.5, 0.5, 0.5]
        values[position] = bad
        with pytest.raises(ModelError, match="the target gave probabilities"):
            check_numbers(verified(values, [0.5] * 3), "near")
        with pytest.raises(ModelError, match="drafter 'near' gave probabilities"):
            check_numbers(verified([0.5] * 3, values), "near")
