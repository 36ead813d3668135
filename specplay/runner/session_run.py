"""Headless runs: one request's lanes, one after the other, streamed to the caller and saved; a
conversation runs them turn after turn.

`specplay run` uses it per sample, reading the engine where it runs, on the main thread: a
second thread to read its events cost target-only generation of the demo models several percent
on two CPUs (benchmarks/vs_mlx_lm --processes). The playground, whose main thread is
Textual's, runs its lanes on the model thread instead (host.py), through the same session writer
and request record.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from specplay.config.run_config import RequestConfig, RunConfig
from specplay.engine.capabilities import Capabilities
from specplay.engine.conversation import Exchange
from specplay.engine.events import Event
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.settings import ROUTE_SETTINGS
from specplay.engine.stream import EventStream
from specplay.store import LaneRecord, SessionWriter
from specplay.store.codec import request_record

OnEvent = Callable[[str, Event], None]
"""(lane, event), on the caller's thread, as each event arrives."""


@dataclass
class TurnRun:
    """One turn of a conversation: its prompt and each lane's answer."""

    index: int
    prompt: str
    main: LaneRecord
    baseline: LaneRecord | None = None
    """The target-only lane run beside a saved speculative one."""

    @property
    def lanes(self) -> list[LaneRecord]:
        return [self.main, *([self.baseline] if self.baseline is not None else [])]


@dataclass
class SampleRun:
    turns: list[TurnRun]
    """The conversation's turns that ran, in order (one for a single prompt); a cancelled turn
    is the last."""
    session: Path | None = None
    """Where the run was saved."""

    @property
    def main(self) -> LaneRecord:
        """The first turn's requested lane."""
        return self.turns[0].main

    @property
    def baseline(self) -> LaneRecord | None:
        """The first turn's target-only lane."""
        return self.turns[0].baseline

    @property
    def cancelled(self) -> bool:
        """Whether Ctrl-C stopped a lane (and with it the conversation)."""
        return any(_cancelled(lane) for turn in self.turns for lane in turn.lanes)


def _cancelled(lane: LaneRecord) -> bool:
    return lane.done is not None and lane.done.finish_reason == "cancelled"


def open_writer(
    config: RunConfig,
    request: RequestConfig,
    *,
    prompt_token_ids: Sequence[int],
    lanes: list[str],
    identity: dict[str, Any],
    capabilities: Capabilities,
    route_map: Mapping[str, str],
    token_text: Callable[[int], str] | None = None,
    **about: object,
) -> SessionWriter:
    """A session in `config`'s folder for a run of `request` (its prompt, seed and mode as run) on
    the stream `identity` and `capabilities` describe; `about` adds to the request record, as does
    the learned router `--route auto` asked, if any (its file's name, hash and drafters).
    `token_text`: a local tokenizer's, to record drafted tokens' texts (never a server round trip)."""
    assert request.prompt is not None
    if config.router is not None:
        about = {"router": config.router.record(), **about}
    record = request_record(request, route_map, **about)
    return SessionWriter(
        config.sessions_dir,
        prompt=request.prompt,
        prompt_token_ids=list(prompt_token_ids),
        lanes=lanes,
        backend=identity,
        request=record,
        capabilities=capabilities,
        token_text=token_text,
    )


def local_token_text(stream: EventStream) -> Callable[[int], str] | None:
    """The stream's token texts where they cost no round trip to a server."""
    return stream.token_text if stream.capabilities.local_token_text else None


def run_sample(
    stream: EventStream,
    config: RunConfig,
    request: Request,
    on_event: OnEvent,
    save: bool,
    baseline: bool,
    identity: dict[str, Any] | None = None,
    on_interrupt: Callable[[], None] = lambda: None,
    about: Mapping[str, object] | None = None,
    follow_ups: Sequence[str] = (),
    on_turn: Callable[[int, str], None] = lambda index, prompt: None,
    on_turn_done: Callable[[TurnRun], None] = lambda turn: None,
) -> SampleRun:
    """The requested lane, then, for a speculative run with `baseline`, its target-only
    comparison, on this thread; then each of `follow_ups` the same way, a conversation's later
    turns: each lane encodes the turn after its own earlier exchanges and continues its own
    caches. `on_turn(index, prompt)` comes before a turn's events, `on_turn_done` after its lanes.
    Ctrl-C asks the run to stop at its next round and keeps what it made (saved as incomplete;
    no later lane or turn runs), calling `on_interrupt`; a second Ctrl-C raises KeyboardInterrupt
    at once (the session stays, incomplete). `identity` is the stream's description, asked once
    per run; `about` adds to a saved session's request record (a prompt's category and name), as
    does where the router sent the prompt and why, where the route setting asked it (auto, adaptive);
    a later turn's own choice goes in its turn record (`route_record`)."""
    lanes = [request.mode]
    if baseline and request.mode == "speculative" and stream.capabilities.baseline:
        lanes.append("target")
    writer = None
    if save:
        request_config = replace(config.request, prompt=request.prompt, seed=request.seed, mode=request.mode)
        if (choice := route_record(stream, config.settings.route, request.mode, request.prompt)) is not None:
            about = {"route_choice": choice, **(about or {})}
        writer = open_writer(
            config,
            request_config,
            prompt_token_ids=request.prompt_token_ids,
            lanes=lanes,
            identity=identity or {},
            capabilities=stream.capabilities,
            route_map=stream.routing.route_map,
            token_text=local_token_text(stream),
            **(about or {}),
        )
    run = SampleRun([])
    earlier: dict[str, list[Exchange]] = {lane: [] for lane in lanes}
    try:
        for index, prompt in enumerate([request.prompt, *follow_ups]):
            if index and writer is not None:  # each turn's prompt is routed anew: its own choice
                writer.start_turn(prompt, route_record(stream, config.settings.route, request.mode, prompt))
            on_turn(index, prompt)
            records: list[LaneRecord] = []
            for mode in lanes:
                if index == 0:
                    asked = replace(request, mode=mode)
                else:
                    ids = tuple(stream.encode(prompt, config.request.raw, earlier[mode]))
                    asked = replace(request, prompt=prompt, prompt_token_ids=ids, mode=mode, continues=True)
                controls = LiveControls(config.settings, stream.drafters if mode == request.mode else ())
                records.append(
                    stream_lane(
                        stream, asked, controls=controls, on_event=on_event, writer=writer, on_interrupt=on_interrupt
                    )
                )
                earlier[mode].append(Exchange(prompt, records[-1].text))
                if _cancelled(records[-1]):
                    break
            turn = TurnRun(index, prompt, records[0], records[1] if records[1:] else None)
            run.turns.append(turn)
            on_turn_done(turn)
            if run.cancelled:
                break
        run.session = writer.finalize() if writer is not None else None
        return run
    finally:
        if writer is not None:
            writer.close()


def route_record(stream: EventStream, route: str, mode: str, prompt: str) -> dict[str, object] | None:
    """What a session records of where the route setting sent `prompt` and why (`auto`, and
    `adaptive`'s first drafter), as the engine chooses it for a lane of `mode`; None where the
    setting chooses nothing (a named drafter, or no drafter at all: target-only)."""
    if mode == "target" or route not in ROUTE_SETTINGS:
        return None
    return stream.routing.choice(prompt).record()


def stream_lane(
    stream: EventStream,
    request: Request,
    *,
    controls: LiveControls,
    on_event: OnEvent,
    writer: SessionWriter | None,
    on_interrupt: Callable[[], None] = lambda: None,
) -> LaneRecord:
    """One generation's events, each to `on_event` and the session as it comes. Ctrl-C asks the
    run to stop at its next round, whose last events are still read; a second one does not wait
    for them (a server may be slow to answer)."""
    record = LaneRecord(request.mode)
    with ctrl_c_stops(controls, on_interrupt):
        for event in stream.generate(request, controls):
            record.add(event)
            if writer is not None:
                writer.write_event(request.mode, event)
            on_event(request.mode, event)
    return record


@contextmanager
def ctrl_c_stops(controls: LiveControls, on_interrupt: Callable[[], None]) -> Iterator[None]:
    """Within the block, the first Ctrl-C asks the run `controls` steer to stop at its next round
    (and calls `on_interrupt`); a second raises KeyboardInterrupt. Only the main thread receives
    signals; elsewhere Ctrl-C is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if controls.stop_requested:
            raise KeyboardInterrupt
        controls.request_stop()
        on_interrupt()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
