"""Lanes taking turns on one model thread, each timed by its own work, and frames drawn between turns."""

from __future__ import annotations

import threading
import time

import pytest

from specplay.backends.mlx import MlxBackend
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.runner import gate as gate_module
from specplay.runner.gate import TurnGate
from specplay.runner.lanes import LaneClock, side_by_side
from tests.support.checks import every
from tests.support.engine_runs import done, run
from tests.support.prompts import CODE_PROMPT


def test_lane_clock_counts_only_its_turns() -> None:
    now = [0.0]
    clock = LaneClock(lambda: now[0])
    clock.resume()
    now[0] = 2.0
    assert clock() == 2.0
    clock.pause()
    now[0] = 10.0  # another lane's turn
    assert clock() == 2.0
    clock.resume()
    now[0] = 10.5
    clock.pause()
    assert clock() == 2.5


def test_side_by_side_lanes_match_lanes_run_alone(backend: MlxBackend) -> None:
    ids = tuple(backend.encode(CODE_PROMPT, raw=True))
    lanes = {}
    for mode in ("target", "speculative"):
        clock = LaneClock()
        engine = SpecEngine(backend, clock=clock)
        request = Request(CODE_PROMPT, ids, mode, max_tokens=40, ignore_eos=True, pipeline=False)  # type: ignore[arg-type]
        lanes[mode] = (clock, engine.generate(request, LiveControls(SpecSettings(route="near"), backend.drafters)))
    start = time.perf_counter()
    order, finals = [], {}
    for name, event in side_by_side(lanes):
        order.append(name)
        if isinstance(event, DoneEvent):
            finals[name] = event
    wall_s = time.perf_counter() - start
    assert order[:4] == ["target", "speculative", "target", "speculative"]  # they take turns
    alone = done(run(backend, CODE_PROMPT, mode="target"))
    assert finals["target"].token_ids == finals["speculative"].token_ids == alone.token_ids
    busy_s = [clock() for clock, _ in lanes.values()]
    assert every(b > 0 for b in busy_s) and sum(busy_s) <= wall_s
    assert every(final.metrics["tokens_per_s"] > 0 for final in finals.values())


def test_unpipelined_steps_give_the_same_tokens(backend: MlxBackend) -> None:
    ids = tuple(backend.encode(CODE_PROMPT, raw=True))
    for temperature in (0.0, 1.0):
        outputs = []
        for pipeline in (True, False):
            request = Request(CODE_PROMPT, ids, "target", seed=3, max_tokens=30, pipeline=pipeline)
            controls = LiveControls(SpecSettings().changed(temperature=temperature))
            outputs.append([e for e in SpecEngine(backend).generate(request, controls)][-1].token_ids)
        assert outputs[0] == outputs[1]


def test_a_hold_stops_the_model_thread_at_its_next_boundary_until_released() -> None:
    gate = TurnGate()
    gate.between_turns()  # nothing asked: no wait
    held = threading.Event()
    passed = threading.Event()

    def model_thread() -> None:
        gate.between_turns()
        passed.set()

    gate.hold(held.set)
    thread = threading.Thread(target=model_thread)
    thread.start()
    assert held.wait(5.0)  # the UI's turn is given at the boundary...
    assert not passed.wait(0.2)  # ...and the models wait while it draws
    gate.release()
    assert passed.wait(5.0)
    thread.join()
    assert gate.held_s >= 0.2
    gate.hold(lambda: pytest.fail("a released hold is never given"))
    gate.release()
    gate.between_turns()


def test_a_hold_never_released_stops_the_models_for_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "MAX_HOLD_S", 0.1)
    gate = TurnGate()
    gate.hold(lambda: None)
    started = time.perf_counter()
    gate.between_turns()
    assert 0.1 <= time.perf_counter() - started < 5.0
