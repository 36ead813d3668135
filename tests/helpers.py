"""Running the engine on real tiny models in tests."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specplay.backends.mlx import MlxBackend
from specplay.backends.mlx.generation import MlxGeneration
from specplay.engine.controls import LiveControls
from specplay.engine.events import DoneEvent, Event, RoundEvent, StepEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.runner.thread import ModelThread


class Observed:
    """The real MLX backend, with its generations kept for inspection and an optional EOS override."""

    def __init__(self, backend: MlxBackend, eos_token_ids: frozenset[int] | None = None) -> None:
        self.inner = backend
        self.drafters = backend.drafters
        self.eos_token_ids = backend.eos_token_ids if eos_token_ids is None else eos_token_ids
        self.capabilities = backend.capabilities
        self.context_length = backend.context_length
        self.generations: list[MlxGeneration] = []

    def encode(self, prompt: str, raw: bool) -> list[int]:
        return self.inner.encode(prompt, raw)

    def detokenizer(self) -> Any:
        return self.inner.detokenizer()

    def open_generation(
        self, prompt_token_ids: Sequence[int], prefill: Sequence[str | None] = (None,)
    ) -> MlxGeneration:
        generation = self.inner.open_generation(prompt_token_ids, prefill)
        self.generations.append(generation)
        return generation

    def token_text(self, token_id: int) -> str:
        return self.inner.token_text(token_id)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        return self.inner.score(prompt_token_ids, token_ids)

    def close(self) -> None:
        self.inner.close()


def run(
    backend: MlxBackend | Observed,
    prompt: str,
    mode: str = "speculative",
    seed: int = 0,
    max_tokens: int = 40,
    ignore_eos: bool = True,
    on_event: Callable[[Event, LiveControls], None] | None = None,
    temperature: float = 0.0,
    raw: bool = True,
    **settings: Any,
) -> list[Event]:
    """All events of one generation; `on_event` may change the controls between rounds; `raw`
    False puts the prompt through the chat template."""
    controls = LiveControls(SpecSettings(sampling=SamplingParams(temperature)).changed(**settings), backend.drafters)
    request = Request(prompt, tuple(backend.encode(prompt, raw=raw)), mode, seed, max_tokens, ignore_eos)  # type: ignore[arg-type]
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


def chunk_sources(chunk_sizes: list[int], k: int | None) -> list[str]:
    """vLLM native mode's chunk-size guess over a whole stream (the first chunk opens with the prefill token)."""
    from specplay.backends.vllm.native import chunk_guess

    return [source for i, size in enumerate(chunk_sizes) for source in chunk_guess(size, k, first=i == 0)]


def events_from(thread: ModelThread, make_events: Callable[[], Iterator[Event]]) -> Iterator[Event]:
    """A generator's events made on the model thread and read on this one as they come, as the
    playground's host hands them to its UI thread; an error on the model thread is raised here."""
    end = object()
    arrived: queue.Queue[Any] = queue.Queue()

    def job() -> None:
        try:
            for event in make_events():
                arrived.put(event)
        finally:
            arrived.put(end)

    finished = thread.submit(job)
    while (event := arrived.get()) is not end:
        yield event
    finished.result()
