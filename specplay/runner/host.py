"""The model thread and what lives on it: loading, and runs of two lanes side by side.

Nothing here touches Textual: results go through callbacks, which the app points at
post_message (thread-safe). MLX state belongs to the thread that made it, so the backend is
loaded by a callable run on the model thread, never passed in already loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from specplay.engine.controls import LiveControls
from specplay.engine.events import Event, RoundEvent
from specplay.engine.loop import Request, SpecEngine
from specplay.engine.settings import SpecSettings
from specplay.errors import ConfigError, SpecplayError
from specplay.runner.lanes import LaneClock, side_by_side
from specplay.runner.thread import ModelThread

LANES = ("speculative", "target")
"""Session lane order: the speculative lane first, then its target-only comparison."""
DRAFT_LANE = "draft"
"""The optional third lane: the routed drafter alone."""

Loader = Callable[[], Any]
"""Loads the backend (an MlxBackend or anything with the same methods) on the model thread."""


def error_line(error: BaseException) -> str:
    """One clear line for the status bar."""
    if isinstance(error, ConfigError):
        from specplay.cli.options import config_error_line  # argparse only, no UI

        return config_error_line(error)
    if isinstance(error, SpecplayError):
        return str(error)
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class RunSpec:
    prompt: str
    settings: SpecSettings
    seed: int = 0
    max_tokens: int = 256
    ignore_eos: bool = False
    raw: bool = False


class ModelHost:
    def __init__(
        self,
        loader: Loader,
        on_exit: Callable[[], None] | None = None,
        route_map: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.thread = ModelThread(on_exit=on_exit)
        self._loader = loader
        self._route_map = dict(route_map or {}) or None
        self._clock = clock
        self.backend: Any = None
        self.route_map: dict[str, str] = {}
        """Router class to drafter, as the engine resolved it at load (saved in sessions)."""

    def load(self, done: Callable[[tuple[str, ...] | None, dict[str, Any], BaseException | None], None]) -> None:
        """Load on the model thread; `done(drafters, identity, error)` is called there."""

        def load() -> tuple[tuple[str, ...], dict[str, Any]]:
            backend = self._loader()
            engine = SpecEngine(backend, route_map=self._route_map)  # a bad --route-map fails now
            self.backend, self.route_map = backend, engine.route_map
            describe = getattr(backend, "describe", None)
            return tuple(backend.drafters), describe() if describe else {}

        def finished(future: Future[tuple[tuple[str, ...], dict[str, Any]]]) -> None:
            if error := future.exception():
                done(None, {}, error)
            else:
                done(*future.result(), None)

        self.thread.submit(load).add_done_callback(finished)

    def start(
        self,
        spec: RunSpec,
        controls: Mapping[str, LiveControls],
        on_event: Callable[[str, Event, float, tuple[str, ...]], None],
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        """Run the lanes named in `controls` (each lane's name is its engine mode) in turns on the
        model thread; the speculative lane inspects, so its tokens can be drilled into.

        `on_event(lane, event, busy_s, drafted_text)` per event: busy_s is the lane's own time so far;
        drafted_text the text of each drafted token of a round (decoded here, outside the lanes' clocks,
        because the tokenizer belongs to this thread's backend)."""

        def run() -> None:
            backend = self.backend
            token_ids = tuple(backend.encode(spec.prompt, raw=spec.raw))
            if getattr(backend, "native", False):
                self._run_native(backend, spec, token_ids, controls, on_event)
                return
            lanes = {}
            for lane in controls:
                clock = LaneClock(self._clock)
                engine = SpecEngine(backend, route_map=self._route_map, clock=clock)
                # pipeline=False: the lanes share one device, so no lane may compute on another's time.
                request = Request(
                    spec.prompt,
                    token_ids,
                    lane,  # type: ignore[arg-type]
                    spec.seed,
                    spec.max_tokens,
                    spec.ignore_eos,
                    pipeline=False,
                    inspect=lane == "speculative",
                )
                lanes[lane] = (clock, engine.generate(request, controls[lane]))
            for lane, event in side_by_side(lanes):
                drafted = tuple(_decode(backend, i) for i in event.drafted) if isinstance(event, RoundEvent) else ()
                on_event(lane, event, lanes[lane][0](), drafted)

        def finished(future: Future[None]) -> None:
            on_end(future.exception())

        self.thread.submit(run).add_done_callback(finished)

    def _run_native(
        self,
        backend: Any,
        spec: RunSpec,
        token_ids: tuple[int, ...],
        controls: Mapping[str, LiveControls],
        on_event: Callable[[str, Event, float, tuple[str, ...]], None],
    ) -> None:
        """vLLM's native mode: the speculating server's lane, then the baseline server's
        target-only lane. One after the other, so neither server's time includes the other's,
        and each lane's time is its server's streaming (the speedup compares like with like)."""
        auto_route = SpecEngine(backend, route_map=self._route_map).auto_route(spec.prompt)  # among the servers
        for lane in controls:
            clock = LaneClock(self._clock)
            request = Request(spec.prompt, token_ids, lane, spec.seed, spec.max_tokens, spec.ignore_eos)  # type: ignore[arg-type]
            if lane == "speculative":
                events = backend.events(request, controls[lane], clock, auto_route)
            else:
                events = backend.baseline_events(request, controls[lane], clock)
            clock.resume()
            for event in events:
                on_event(lane, event, clock(), ())

    def close(self) -> None:
        self.thread.close()

    def decode(self, token_id: int) -> str:
        """One token's text, for drill-down views; called on the UI thread (the tokenizer holds no
        MLX state, and waiting for the model thread would mean waiting for the run to end)."""
        return _decode(self.backend, token_id) if self.backend is not None else f"<{token_id}>"


def _decode(backend: Any, token_id: int) -> str:
    tokenizer = getattr(backend, "tokenizer", None)
    return tokenizer.decode([token_id]) if tokenizer is not None else f"<{token_id}>"
