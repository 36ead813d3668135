"""`specplay costs`' advice: the route none where no k pays, acceptance measured over the length
the user will generate (`--max-tokens`, as `run`), and the spread of that acceptance along the text."""

from __future__ import annotations

import json

import pytest

from specplay.cli import main
from specplay.cli.costs import _lines, _report
from specplay.config.run_config import RequestConfig
from specplay.engine.costs import (
    PARTS,
    DrafterPrediction,
    RoundCosts,
    Timing,
    disturbance,
    measure_costs,
    measure_drafter,
    measure_rounds,
    predict_drafter,
)
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.speedup import KPrediction
from tests.support.checks import every
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import Cost, ScriptedBackend, ScriptedModel, scripted_backend, seeded

PROMPT = "def read_lines(path):\n    "


def _scripted_report(backend: ScriptedBackend, max_tokens: int = 64) -> dict:
    engine = SpecEngine(backend, clock=backend.clock)
    prompt = backend.encode(CODE_PROMPT, raw=True)
    settings = SpecSettings()
    costs = measure_costs(engine, prompt, SamplingParams(), settings.acceptance_rule, max_rows=9, repeats=3)
    step_ms = costs.target_step_ms.ms
    rounds = {
        d: measure_drafter(engine, prompt, settings, d, k=8, max_tokens=max_tokens, target_step_ms=step_ms)
        for d in backend.drafters
    }
    return _report(costs, rounds, 8, len(prompt), acceptance_tokens=max_tokens)


def test_where_no_k_pays_the_route_none_is_recommended_not_the_least_slow_k() -> None:
    """`far` is rarely accepted and `dear` costs most of a target step a token: no k pays with
    either; `near` pays. The JSON keeps its names (recommended_k null) and says the route."""
    target = ScriptedModel("target", seeded(0), Cost(step_ms=10.0, row_ms=1.0))
    near = scripted_backend(drafters=("near",)).models["near"]
    dear = ScriptedModel("dear", seeded(0), Cost(step_ms=9.0, row_ms=1.0))  # the target itself, almost as dear
    far = ScriptedModel("far", seeded(1), Cost(step_ms=2.0, row_ms=0.2))
    report = _scripted_report(ScriptedBackend(target, [near, dear, far]))
    lines = _lines(report)
    for name in ("far", "dear"):
        drafter = report["drafters"][name]
        assert every(p["speedup"] < 1 for p in drafter["predicted_speedup_by_k"])
        assert drafter["recommended_k"] is None and drafter["recommended_speedup"] is None
        assert drafter["recommended_speedup_range"] is None and drafter["recommended_route"] == "none"
        best = max(drafter["predicted_speedup_by_k"], key=lambda p: (p["speedup"], -p["k"]))
        assert (drafter["best_k"], drafter["best_speedup"]) == (best["k"], best["speedup"])
        block = _block(lines, name)
        assert not any("<- recommended" in line for line in block)
        (says,) = [line for line in block if "no k pays" in line]
        assert f"k {best['k']}, is predicted at {best['speedup']:.2f}×" in says and "`--route none`" in says
    paying = report["drafters"]["near"]
    assert paying["recommended_route"] == "near" and paying["recommended_k"] == paying["best_k"]
    assert paying["recommended_speedup"] > 1 and not any("no k pays" in line for line in _block(lines, "near"))
    assert sum("<- recommended" in line for line in _block(lines, "near")) == 1


def _block(lines: list[str], drafter: str) -> list[str]:
    """A drafter's lines of the text: from its heading to the blank line after it."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"drafter {drafter}:"))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


def test_the_spread_of_acceptance_is_each_stretch_of_the_text_measured_alone() -> None:
    backend = scripted_backend(drafters=("near",))
    engine = SpecEngine(backend, clock=backend.clock)
    prompt = backend.encode(CODE_PROMPT, raw=True)
    rounds = measure_rounds(engine, prompt, SpecSettings(), "near", k=6, max_tokens=96, ignore_eos=True)
    assert len(rounds.parts) == PARTS and sum(part.rounds for part in rounds.parts) == rounds.rounds
    lengths = [part.mean_acceptance_length for part in rounds.parts]
    assert len(set(lengths)) > 1  # acceptance moves along the text
    # the whole's mean acceptance length is its parts' weighted by their rounds
    weighted = sum(part.mean_acceptance_length * part.rounds for part in rounds.parts) / rounds.rounds
    assert rounds.mean_acceptance_length == pytest.approx(weighted)
    costs = measure_costs(engine, prompt, SamplingParams(), SpecSettings().acceptance_rule, max_rows=7, repeats=2)
    prediction = predict_drafter(costs, "near", rounds, 6)
    best = prediction.best
    assert best is not None
    by_part = prediction.part_speedups(best.k)
    assert len(by_part) == PARTS and min(by_part) < best.speedup < max(by_part)
    report = _report(costs, {"near": rounds}, 6, len(prompt), acceptance_tokens=96)
    near = report["drafters"]["near"]
    assert near["mean_acceptance_length_by_part"] == pytest.approx(lengths)
    assert near["best_speedup_by_part"] == pytest.approx(by_part) and near["acceptance_rounds"] == rounds.rounds
    (line,) = [line for line in _lines(report) if "acceptance along the text" in line]
    assert f"{min(by_part):.2f}–{max(by_part):.2f}×" in line and f"its {rounds.rounds} rounds" in line
    # too few rounds to cut: no parts, and the text says nothing of a spread
    short = measure_rounds(engine, prompt, SpecSettings(), "near", k=6, max_tokens=6, ignore_eos=True)
    assert short.parts == () and _report(costs, {"near": short}, 6, 1)["drafters"]["near"]["best_speedup_by_part"] == []


def test_acceptance_is_measured_over_the_length_run_generates(capsys: pytest.CaptureFixture[str]) -> None:
    """--max-tokens (default run's) is the acceptance run's length; --acceptance-tokens still sets it."""
    quick = ["--target", "demo", "--prompt", PROMPT, "--repeats", "1", "--max-rows", "5", "--ignore-eos", "--json"]
    rounds = {}
    for flags, length in ((["--max-tokens", "64"], 64), (["--max-tokens", "64", "--acceptance-tokens", "16"], 16)):
        capsys.readouterr()
        assert main(["costs", *quick, *flags]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["acceptance_tokens"] == length
        assert report["models"] == "the demo models that ship with specplay (toys); drafters base, prose"
        assert _lines(report)[:2] == [
            f"models: {report['models']}",
            f"costs at the prompt's "
            f"{report['prompt_tokens']} tokens, acceptance over runs of {length} tokens; medians, spread in brackets",
        ]
        rounds[length] = report["drafters"]["base"]["acceptance_rounds"]
    # rounds of at most 5 tokens: 64 tokens take at least 12 of them, 16 tokens at most 16
    assert rounds[64] >= 12 and rounds[16] <= 16 and rounds[64] > 2 * rounds[16]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["costs", "--help"])
    assert f"default {RequestConfig().max_tokens}, as" in " ".join(capsys.readouterr().out.split())


def test_a_k_the_passes_cannot_tell_apart_is_said_of_its_drafter() -> None:
    """Two drafters: the noise sentence names the one whose fastest k the passes cannot choose."""
    quiet = RoundCosts(Timing(10.0, 0.0), {1: Timing(10.0, 0.0)}, target_runs_ms=(10.0, 10.0, 10.0))

    def k(n: int, speedup: float) -> KPrediction:
        return KPrediction(n, 2.0, 10.0, speedup, 0.5)

    clear = DrafterPrediction([k(1, 1.0), k(2, 1.5)], [[k(1, 1.0), k(2, 1.5)]] * 3, drafter="near")
    noisy = DrafterPrediction([k(1, 1.0), k(2, 1.5)], [[k(1, 1.6), k(2, 1.2)], [k(1, 0.9), k(2, 1.7)]], drafter="far")
    assert disturbance(quiet, [clear]) is None
    reason = disturbance(quiet, [clear, noisy])
    assert reason is not None and reason.startswith("far's k 1, predicted -33% from its fastest k 2, is inside")
