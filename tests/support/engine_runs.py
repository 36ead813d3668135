"""Running the engine in tests, on any backend (the scripted one is timed by its own clock), and reading its events."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specplay.engine.backend_protocol import Backend, Generation
from specplay.engine.conversation import Exchange
from specplay.engine.events import DoneEvent, Event, RoundEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.runner.thread import ModelThread
from tests.support.scripted import ScriptedBackend


def run(
    backend: Backend,
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
    clock = backend.clock if isinstance(backend, ScriptedBackend) else time.perf_counter
    for event in SpecEngine(backend, clock=clock).generate(request, controls):
        events.append(event)
        if on_event is not None:
            on_event(event, controls)
    return events


def converse(
    engine: SpecEngine,
    prompts: Sequence[str],
    mode: str,
    *,
    keep: bool = True,
    temperature: float = 0.0,
    route: str = "auto",
    on_turn: Callable[[int], None] | None = None,
) -> list[list[Event]]:
    """Each prompt a turn after the mode's own earlier answers, raw False (the chat template);
    `keep`: the turns continue (the mode's caches kept); `on_turn(i)` before turn i."""
    settings = SpecSettings(sampling=SamplingParams(temperature), route=route)
    earlier: list[Exchange] = []
    turns = []
    for index, prompt in enumerate(prompts):
        if on_turn is not None:
            on_turn(index)
        ids = tuple(engine.encode(prompt, False, earlier))
        request = Request(prompt, ids, mode, seed=index, max_tokens=24, continues=keep and index > 0)  # type: ignore[arg-type]
        events = list(engine.generate(request, LiveControls(settings, engine.drafters)))
        done = events[-1]
        assert isinstance(done, DoneEvent)
        earlier.append(Exchange(prompt, done.text))
        turns.append(events)
    return turns


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


def assert_caches_hold_the_committed(generation: Generation, event: RoundEvent) -> None:
    """After a round every cache holds the committed tokens but the last; the round's drafter
    lags by one more only after a bonus token (it never saw the last drafted token)."""
    lengths = generation.cache_lengths()
    committed = len(generation.tokens)
    assert lengths["target"] == committed - 1
    assert lengths[event.drafter] == committed - 1 - (event.tokens[-1].source == "bonus")
    assert max(lengths.values()) <= committed - 1
