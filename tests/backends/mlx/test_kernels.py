"""The compiled sampling and acceptance math gives the eager math's arrays, so a seed gives the
same text whichever runs (GPUs compile it, CPUs do not: backends/mlx/kernels.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import mlx.core as mx
import pytest

from specplay.backends.mlx import MlxBackend, kernels
from specplay.engine.events import RoundEvent
from specplay.engine.rules import RULES as REGISTRY
from specplay.engine.rules import AcceptanceRule, Cascade, Lenience, Mentored, RuleParams, Typical
from tests.support.checks import every
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import CODE_PROMPT


@pytest.fixture
def compiled(backend: MlxBackend, monkeypatch: pytest.MonkeyPatch) -> Iterator[MlxBackend]:
    """The backend with its math compiled, as on a GPU; checks that compiled kernels ran."""
    traced: list[object] = []

    def compile_and_count(fn: object) -> object:
        traced.append(fn)
        return real_compile(fn)

    real_compile = mx.compile
    monkeypatch.setattr(mx, "compile", compile_and_count)
    kernels.draw_kernel.cache_clear()
    kernels._verify_kernel.cache_clear()
    backend.compiled = True
    try:
        yield backend
    finally:
        backend.compiled = False
        kernels.draw_kernel.cache_clear()
        kernels._verify_kernel.cache_clear()
    assert traced, "no kernel was compiled"


def _positions(events: list) -> list[tuple]:
    """Every number a round's judged positions carry, the drill-down's lists included."""
    return [
        (p.token_id, p.p_target, p.p_draft, p.tv_distance, p.uniform, p.outcome, p.tv_spent, p.top_target, p.top_draft)
        for r in rounds(events)
        for p in r.positions
    ]


RULES = [
    Mentored(),
    Mentored(tv_budget=0.3),
    Typical(typical_epsilon=0.2),
    Lenience(lenience=3.0),
    Cascade(cascade_alpha=0.1),
]


def test_every_registered_rule_is_run_through_the_kernels() -> None:
    assert {type(rule) for rule in RULES} == set(REGISTRY.values())


@pytest.mark.parametrize(
    ("rule", "temperature"),
    [(rule, 0.8) for rule in RULES] + [(RULES[1], 0.0)],  # at T = 0, D > 0 verifies one-hot rows
    ids=lambda v: v.describe() if isinstance(v, AcceptanceRule) else f"T={v}",
)
def test_compiled_math_gives_the_same_run_as_eager_math(
    compiled: MlxBackend, rule: AcceptanceRule, temperature: float
) -> None:
    backend, runs = compiled, {}
    for compile_math in (False, True):
        backend.compiled = compile_math
        runs[compile_math] = [
            run(
                backend,
                CODE_PROMPT,
                seed=seed,
                temperature=temperature,
                k=4,
                route=route,
                rule=rule.name,
                rule_params=rule.into_params(RuleParams()),
                max_tokens=24,
            )
            for seed in (1, 2)
            for route in ("near", "far")
        ]
    for eager, with_kernels in zip(runs[False], runs[True], strict=True):
        assert done(with_kernels).token_ids == done(eager).token_ids
        assert _positions(with_kernels) == _positions(eager)
    # The runs reach every draw the kernels make: rejections (residual draws) and full acceptances.
    outcomes = [p[5] for events in runs[False] for p in _positions(events)]
    assert "rejected" in outcomes and "accepted" in outcomes


def test_compiled_target_only_and_draft_only_runs_match(backend: MlxBackend, compiled: MlxBackend) -> None:
    for mode in ("target", "draft"):
        with_kernels = done(run(compiled, CODE_PROMPT, mode=mode, seed=5, temperature=1.0, route="near"))
        compiled.compiled = False
        eager = done(run(compiled, CODE_PROMPT, mode=mode, seed=5, temperature=1.0, route="near"))
        compiled.compiled = True
        assert with_kernels.token_ids == eager.token_ids


def test_inspected_rounds_are_the_same_compiled(backend: MlxBackend, compiled: MlxBackend) -> None:
    from specplay.engine.live_controls import LiveControls
    from specplay.engine.loop import SpecEngine
    from specplay.engine.request import Request
    from specplay.engine.settings import SamplingParams, SpecSettings

    def inspected() -> list[RoundEvent]:
        settings = SpecSettings(k=3, route="near", sampling=SamplingParams(temperature=1.0))
        request = Request(
            CODE_PROMPT,
            tuple(backend.encode(CODE_PROMPT, raw=True)),
            "speculative",
            9,
            20,
            ignore_eos=True,
            inspect=True,
        )
        events = SpecEngine(backend).generate(request, LiveControls(settings, backend.drafters))
        untimed = {"draft_ms": 0.0, "verify_ms": 0.0, "overhead_ms": 0.0, "catch_up_ms": 0.0}
        return [replace(e, **untimed) for e in events if isinstance(e, RoundEvent)]

    with_kernels = inspected()
    compiled.compiled = False
    eager = inspected()
    compiled.compiled = True
    assert with_kernels == eager and every(p.top_target for r in eager for p in r.positions)
