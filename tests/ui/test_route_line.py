"""The status line says where `--route auto` sent the prompt and which router chose: a learned
router where it is sure enough, the heuristic (through its own route map) where it is not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from specplay.engine.loop import SpecEngine
from specplay.engine.routers.learned import LearnedRouter, fit_router
from specplay.engine.routers.routing import fallback_for, routing_for
from specplay.ui.app import PlaygroundOptions, create_app
from specplay.ui.protocols import RunState
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import scripted_config, wait_for

DRAFTERS = ("near", "far")


def _router() -> LearnedRouter:
    """Code to far, stories to near; the code prompt itself is among what it was fitted to."""
    prompts = [CODE_PROMPT, "def f(x):\n    return x", "Once upon a time a keeper", "The story of a ship at sea"]
    labels = np.eye(2)[[1, 1, 0, 0]]
    fitted = fit_router(prompts, labels, list(DRAFTERS))
    return dataclasses.replace(fitted, label="the learned router r.json", unproven=None)  # as if proven in training


async def _finished_status(tmp_path: Path, router: LearnedRouter) -> str:
    backend = scripted_backend(drafters=DRAFTERS)
    config = scripted_config(backend, tmp_path, prompt=CODE_PROMPT, raw=True, max_tokens=8)
    fallback = fallback_for(router, DRAFTERS, {"code": "near"}, {"code": "near measured 1.4× on code here"})

    def open_stream(_: object) -> SpecEngine:
        return SpecEngine(backend, routing_for(backend.drafters, router, fallback=fallback), clock=backend.clock)

    app = create_app(config, PlaygroundOptions(), backend.clock, open_stream)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.status.startswith("finished"), "the run to end")
        return app.playground.status


async def test_a_sure_learned_router_is_named_with_its_confidence(tmp_path: Path) -> None:
    router = _router()
    sure = router.confidence(CODE_PROMPT)
    status = await _finished_status(tmp_path, router)
    assert f"auto: far (the learned router r.json, {sure:.0%} sure)" in status, status


async def test_an_unsure_learned_router_leaves_the_choice_to_the_heuristic_and_says_so(tmp_path: Path) -> None:
    router = dataclasses.replace(_router(), min_confidence=1.0)
    sure = router.confidence(CODE_PROMPT)
    status = await _finished_status(tmp_path, router)
    assert (
        f"auto: code prompt → near (the heuristic, as the learned router r.json is {sure:.0%} sure, below its "
        "100%; the route map: near measured 1.4× on code here)"
    ) in status, status
