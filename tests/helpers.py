"""Running the engine on real tiny models in tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specplay.backends.mlx import MlxBackend
from specplay.backends.mlx.lane import MlxLane
from specplay.engine.controls import LiveControls
from specplay.engine.events import DoneEvent, Event, RoundEvent, StepEvent
from specplay.engine.loop import Request, SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings


class Observed:
    """The real MLX backend, with its lanes kept for inspection and an optional EOS override."""

    def __init__(self, backend: MlxBackend, eos_token_ids: frozenset[int] | None = None) -> None:
        self.inner = backend
        self.drafters = backend.drafters
        self.eos_token_ids = backend.eos_token_ids if eos_token_ids is None else eos_token_ids
        self.lanes: list[MlxLane] = []

    def encode(self, prompt: str, raw: bool) -> list[int]:
        return self.inner.encode(prompt, raw)

    def detokenizer(self) -> Any:
        return self.inner.detokenizer()

    def open_lane(self, prompt_token_ids: Sequence[int], prefill: Sequence[str | None] = (None,)) -> MlxLane:
        lane = self.inner.open_lane(prompt_token_ids, prefill)
        self.lanes.append(lane)
        return lane


def run(
    backend: MlxBackend | Observed,
    prompt: str,
    mode: str = "speculative",
    seed: int = 0,
    max_tokens: int = 40,
    ignore_eos: bool = True,
    on_event: Callable[[Event, LiveControls], None] | None = None,
    temperature: float = 0.0,
    **settings: Any,
) -> list[Event]:
    """All events of one generation; `on_event` may change the controls between rounds."""
    controls = LiveControls(SpecSettings(sampling=SamplingParams(temperature), **settings), backend.drafters)
    request = Request(prompt, tuple(backend.encode(prompt, raw=True)), mode, seed, max_tokens, ignore_eos)  # type: ignore[arg-type]
    events = []
    for event in SpecEngine(backend).generate(request, controls):  # type: ignore[arg-type]
        events.append(event)
        if on_event is not None:
            on_event(event, controls)
    return events


def done(events: list[Event]) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent)
    return events[-1]


def rounds(events: list[Event]) -> list[RoundEvent]:
    return [e for e in events if isinstance(e, RoundEvent)]


def sources(events: list[Event]) -> list[str]:
    out = []
    for event in events:
        if isinstance(event, RoundEvent):
            out += [t.source for t in event.tokens]
        elif isinstance(event, StepEvent):
            out.append(event.token.source)
    return out
