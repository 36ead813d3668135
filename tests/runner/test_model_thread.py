"""Live control from another thread while the model thread generates, as the playground does it."""

from __future__ import annotations

from specplay.backends.mlx import load_mlx_backend, release_thread
from specplay.engine.events import ControlEvent, DoneEvent, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.runner.thread import ModelThread
from tests.support.checks import every
from tests.support.engine_runs import events_from
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels


def test_changes_and_stop_from_another_thread(tiny: TinyModels) -> None:
    thread = ModelThread(on_exit=release_thread)
    try:
        backend = thread.call(
            lambda: load_mlx_backend(str(tiny.target), [("near", str(tiny.near)), ("far", str(tiny.far))])
        )
        engine = SpecEngine(backend)
        controls = LiveControls(SpecSettings(k=5, route="near"), backend.drafters)
        request = Request(CODE_PROMPT, tuple(backend.encode(CODE_PROMPT, raw=True)), max_tokens=400, ignore_eos=True)
        events, seen_rounds = [], 0
        for event in events_from(thread, lambda: engine.generate(request, controls)):
            events.append(event)
            if isinstance(event, RoundEvent):
                seen_rounds += 1
                if seen_rounds == 2:
                    controls.update(k=2, route="far")  # from this (the main) thread
                if seen_rounds == 12:
                    controls.request_stop()
    finally:
        thread.close()

    change = next(i for i, e in enumerate(events) if isinstance(e, ControlEvent))
    before = [e for e in events[:change] if isinstance(e, RoundEvent)]
    after = [e for e in events[change:] if isinstance(e, RoundEvent)]
    assert before and every(r.nodes == 5 and r.drafter == "near" for r in before)
    assert after and every(r.nodes == 2 and r.drafter == "far" for r in after)
    assert events[change].token_index == sum(len(r.tokens) for r in before)
    final = events[-1]
    assert isinstance(final, DoneEvent) and final.finish_reason == "cancelled"
    assert len(final.token_ids) < 400
