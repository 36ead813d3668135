"""Suffix decoding on real MLX models: lossless at temperature 0 in chains and trees, on the tiny
models, the demo models and SmolLM2 (slow tier); remembering earlier outputs across generations
and from the sessions folder; and everywhere a drafter goes: counterfactual routes, adaptive
routing on its free proposals, route maps, `costs` and `bench`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.cli import main
from specplay.drafters import ModelConfig, parse_model
from specplay.engine.events import RoundEvent
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.tiny_models import TinyModels

REPEAT_PROMPT = "for item in items:\n    total = total + item\nfor item in items:\n    total ="
"""A prompt that repeats itself: the request's own index has something to match from the start."""
PROMPTS = (CODE_PROMPT, PROSE_PROMPT, REPEAT_PROMPT)


def suffix(name: str, options: str = "") -> tuple[str, ModelConfig]:
    return name, parse_model(name, "drafter", f"suffix:{options}" if options else "suffix", "draft")


def suffix_backend(target: Path | str, *drafters: tuple[str, ModelConfig | str]) -> MlxBackend:
    return load_mlx_backend(str(target), list(drafters) or [suffix("mem", "factor=2")])


def from_memory(events: list[Any]) -> list[RoundEvent]:
    return [r for r in rounds(events) if r.origin is not None and "of this request" not in r.origin]


def test_greedy_output_is_the_targets_in_chains_and_trees_run_after_run(tiny: TinyModels) -> None:
    """Each prompt is run speculatively before its target-only run (nothing to remember of it yet),
    then again in chains and trees with that output remembered: every run's tokens are the
    target's own, and the later runs draft from the earlier output."""
    backend = suffix_backend(tiny.target)
    drafted_trees = 0
    for prompt in PROMPTS:
        first = run(backend, prompt, route="mem", k=4, max_tokens=48)
        target = done(run(backend, prompt, mode="target", max_tokens=48)).token_ids
        assert done(first).token_ids == target
        for width in (1, 3):
            events = run(backend, prompt, route="mem", k=4, width=width, max_tokens=48)
            assert done(events).token_ids == target, (prompt, width)
            assert sum(r.num_accepted for r in rounds(events)) > 0
            remembered = from_memory(events)
            assert remembered and all("an output of this process" in r.origin for r in remembered if r.origin)
            drafted_trees += sum(r.nodes > r.depth for r in rounds(events))
    assert drafted_trees > 0  # some rounds branched: their siblings were judged too


def test_a_repeated_prompt_is_drafted_from_memory_and_accepted_more(tiny: TinyModels) -> None:
    backend = suffix_backend(tiny.target, suffix("mem"))
    first = run(backend, CODE_PROMPT, route="mem", k=6, max_tokens=64)
    again = run(backend, CODE_PROMPT, route="mem", k=6, max_tokens=64)
    assert done(again).token_ids == done(first).token_ids
    assert not from_memory(first)  # nothing was remembered before the first run
    kept = [sum(r.num_accepted for r in rounds(events)) for events in (first, again)]
    assert kept[1] > kept[0] and len(rounds(again)) < len(rounds(first))


def test_memory_off_drafts_from_the_request_alone(tiny: TinyModels) -> None:
    backend = suffix_backend(tiny.target, suffix("mem", "memory=0"))
    run(backend, REPEAT_PROMPT, route="mem", max_tokens=32)
    again = run(backend, REPEAT_PROMPT, route="mem", max_tokens=32)
    assert not from_memory(again)
    assert any(r.origin and "of this request" in r.origin for r in rounds(again))
    assert backend.describe()["models"]["mem"]["loaded"].startswith("memory off")


def test_every_route_setting_takes_it(tiny: TinyModels) -> None:
    """Counterfactual routes judge its proposal beside another drafter's, adaptive routing reads its
    free proposals, and auto routes a class to it through the route map: lossless throughout."""
    backend = suffix_backend(
        tiny.target, suffix("mem"), ("lookup", parse_model("lookup", "drafter", "prompt-lookup", "draft"))
    )
    target = done(run(backend, REPEAT_PROMPT, mode="target", max_tokens=40)).token_ids
    compared = run(backend, REPEAT_PROMPT, route="lookup", counterfactual=True, max_tokens=40)
    assert done(compared).token_ids == target
    assert {c.drafter for r in rounds(compared) for c in r.counterfactuals} == {"mem"}
    assert any(c.num_accepted for r in rounds(compared) for c in r.counterfactuals)
    adaptive = run(backend, REPEAT_PROMPT, route="adaptive", max_tokens=40)
    assert done(adaptive).token_ids == target
    assert "mem" in {r.drafter for r in rounds(adaptive)}
    generation = backend.open_generation(backend.encode(REPEAT_PROMPT, raw=True))
    assert isinstance(generation.proposal("mem", 4), list)  # free: proposed without a model's work


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Any], str]:
    code = main(["run", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return lines[0], err


def test_the_demo_models_remember_the_sessions_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first run finds nothing to read and saves its session; the next, a new process in all
    but name, reads it as it starts (one line on stderr), drafts from it and says so in its rounds,
    chains and trees alike, every token the target's."""
    sessions = tmp_path / "sessions"
    common = ["--target", "demo", "--draft", "mem=suffix", "--route", "mem", "--prompt", CODE_PROMPT, "--raw"]
    common += ["--max-tokens", "48", "--json", "--sessions-dir", str(sessions)]
    first, err = _run_json(capsys, *common, "--save")
    assert f"mem: found no earlier outputs of this target in {sessions}" in err
    saved = Path(first["session"]).name.removesuffix(".jsonl")
    for width in ("1", "3"):
        again, err = _run_json(capsys, *common, "--width", width)
        assert again["token_ids"] == first["baseline"]["token_ids"] == first["token_ids"]
        assert f"mem: read {len(first['token_ids'])} tokens of 1 earlier output from 1 session" in err
        origins = [r["origin"] for r in again["rounds"] if r["origin"]]
        assert any(f"of session {saved}" in origin for origin in origins)
        assert again["metrics"]["mean_acceptance_length"] > first["metrics"]["mean_acceptance_length"]
    record = json.loads(Path(first["session"]).read_text().splitlines()[0])["backend"]["models"]["mem"]
    assert record["kind"] == "suffix" and record["loaded"].startswith("memory of 0 tokens")


def test_a_route_map_sends_a_class_to_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--target", "demo", "--draft", "mem=suffix", "--draft", "lookup=prompt-lookup", "--raw"]
    common += ["--route-map", "code=mem", "--route-map", "prose=lookup", "--max-tokens", "16", "--json"]
    common += ["--sessions-dir", str(tmp_path)]
    code, _ = _run_json(capsys, *common, "--prompt", CODE_PROMPT)
    prose, _ = _run_json(capsys, *common, "--prompt", PROSE_PROMPT)
    assert (code["route"], prose["route"]) == ("mem", "lookup")
    assert code["route_choice"]["drafter"] == "mem"


@pytest.mark.parametrize("width", [1, 3])
def test_smollm2_greedy_is_the_targets(smollm2: Path, width: int) -> None:
    """The real model, chat-templated prompts, each asked twice: the second drafted from the first."""
    backend = load_mlx_backend(str(smollm2), [suffix("mem")])
    trees = 0
    for prompt in ("Write a Python function that returns the squares of a list.", "Name three rivers in Europe."):
        target = done(run(backend, prompt, mode="target", max_tokens=64, raw=False)).token_ids
        events = run(backend, prompt, route="mem", k=5, width=width, max_tokens=64, raw=False)
        assert done(events).token_ids == target
        assert from_memory(events)
        trees += sum(r.nodes > r.depth for r in rounds(events))
    assert (trees > 0) == (width > 1)  # SmolLM2 takes tree passes: the branches were verified
