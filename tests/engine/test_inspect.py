"""What token drill-down needs from the engine: each distribution's top tokens, only when asked."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from specplay.engine.events import RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import TOP_N, SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from tests.support.checks import every
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import ScriptedBackend


def _rounds(scripted: ScriptedBackend, inspect: bool, temperature: float) -> list[RoundEvent]:
    engine = SpecEngine(scripted, clock=scripted.clock)
    ids = tuple(scripted.encode(CODE_PROMPT, raw=True))
    settings = SpecSettings(k=4, route="near", sampling=SamplingParams(temperature=temperature))
    request = Request(CODE_PROMPT, ids, "speculative", seed=3, max_tokens=24, ignore_eos=True, inspect=inspect)
    return [e for e in engine.generate(request, LiveControls(settings, scripted.drafters)) if isinstance(e, RoundEvent)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_inspecting_reports_top_tokens_and_changes_nothing_else(scripted: ScriptedBackend, temperature: float) -> None:
    plain, inspected = _rounds(scripted, False, temperature), _rounds(scripted, True, temperature)
    assert [r.tokens for r in plain] == [r.tokens for r in inspected]  # same draws, same decisions
    assert every(p.top_target is None and p.top_draft is None for r in plain for p in r.positions)
    assert every(r.bonus_top_target is None for r in plain)
    for r in inspected:
        assert r.bonus_top_target
        for p in r.positions:
            assert p.top_target and p.top_draft
            for top, own in ((p.top_target, p.p_target), (p.top_draft, p.p_draft)):
                probs = [prob for _, prob in top]
                assert len(top) <= TOP_N and probs == sorted(probs, reverse=True)
                assert sum(probs) <= 1 + 1e-5
                # The drafted token's own probability is in the list whenever it ranks high enough.
                if own > probs[-1] + 1e-6:
                    assert (p.token_id, pytest.approx(own, abs=1e-5)) in [(t, pytest.approx(q)) for t, q in top]
            if temperature == 0.0:  # one-hot distributions: a single candidate, the argmax
                assert len(p.top_target) == 1 and p.top_target[0][1] == pytest.approx(1.0)
    if temperature > 0:
        assert any(len(p.top_target or ()) == TOP_N for r in inspected for p in r.positions)
    bonus_rounds = [r for r in inspected if r.tokens[-1].source == "bonus"]
    for r in bonus_rounds:  # the bonus is drawn from the distribution reported for it
        assert r.tokens[-1].token_id in [t for t, _ in r.bonus_top_target or ()] or temperature > 0
    asdict(inspected[0])  # event data stays plain values (sessions write it as JSON)
