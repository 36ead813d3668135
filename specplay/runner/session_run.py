"""Headless runs: one request's lanes, one after the other, streamed to the caller and saved.

`specplay run` uses it per sample; the playground runs its lanes side by side instead (host.py),
through the same session writer and request record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specplay.config.run import RequestSpec, RunConfig
from specplay.engine.capabilities import Capabilities
from specplay.engine.controls import LiveControls
from specplay.engine.events import Event
from specplay.engine.request import Request
from specplay.engine.source import EventSource
from specplay.runner.thread import ModelThread
from specplay.store import LaneRecord, SessionWriter
from specplay.store.codec import request_record

OnEvent = Callable[[str, Event], None]
"""(lane, event), on the caller's thread, as each event arrives."""


@dataclass
class SampleRun:
    main: LaneRecord
    baseline: LaneRecord | None
    """The target-only lane run beside a saved speculative one."""
    session: Path | None
    """Where the run was saved."""

    @property
    def cancelled(self) -> bool:
        return self.main.done is not None and self.main.done.finish_reason == "cancelled"


def open_writer(
    config: RunConfig,
    request: RequestSpec,
    prompt_token_ids: Sequence[int],
    lanes: list[str],
    identity: dict[str, Any],
    capabilities: Capabilities,
    route_map: Mapping[str, str],
    token_text: Callable[[int], str] | None = None,
    **about: object,
) -> SessionWriter:
    """A session in `config`'s folder for a run of `request` (its prompt, seed and mode as run) on
    the source `identity` and `capabilities` describe; `about` adds to the request record.
    `token_text`: a local tokenizer's, to record drafted tokens' texts (never a server round trip)."""
    assert request.prompt is not None
    record = request_record(request, route_map, **about)
    return SessionWriter(
        config.sessions_dir, request.prompt, list(prompt_token_ids), lanes, identity, record, capabilities, token_text
    )


def local_token_text(source: EventSource) -> Callable[[int], str] | None:
    """The source's token texts where they cost no round trip to a server."""
    return source.token_text if source.capabilities.local_token_text else None


def run_sample(
    thread: ModelThread,
    source: EventSource,
    config: RunConfig,
    request: Request,
    on_event: OnEvent,
    save: bool,
    baseline: bool,
    identity: dict[str, Any] | None = None,
    on_interrupt: Callable[[], None] = lambda: None,
) -> SampleRun:
    """The requested lane, then, when saving a speculative run with `baseline`, its target-only
    comparison. Ctrl-C asks the run to stop at its next round and keeps what it made (saved as
    incomplete), calling `on_interrupt`; a second Ctrl-C raises KeyboardInterrupt at once (the
    session stays, incomplete). `identity` is the source's description, asked once per run."""
    lanes = [request.mode]
    if save and baseline and request.mode == "speculative" and source.capabilities.baseline:
        lanes.append("target")
    writer = None
    if save:
        spec = replace(config.request, prompt=request.prompt, seed=request.seed, mode=request.mode)
        ids = request.prompt_token_ids
        writer = open_writer(
            config, spec, ids, lanes, identity or {}, source.capabilities, source.route_map, local_token_text(source)
        )
    try:
        controls = LiveControls(config.settings, source.drafters)
        run = SampleRun(stream_lane(thread, source, request, controls, on_event, writer, on_interrupt), None, None)
        if lanes[1:] and not run.cancelled:
            target_only, baseline_controls = replace(request, mode="target"), LiveControls(config.settings)
            run.baseline = stream_lane(thread, source, target_only, baseline_controls, on_event, writer, on_interrupt)
        run.session = writer.finalize() if writer is not None else None
        return run
    finally:
        if writer is not None:
            writer.close()


def stream_lane(
    thread: ModelThread,
    source: EventSource,
    request: Request,
    controls: LiveControls,
    on_event: OnEvent,
    writer: SessionWriter | None,
    on_interrupt: Callable[[], None] = lambda: None,
) -> LaneRecord:
    """One generation's events, made on the model thread; each goes to `on_event` and the session
    as it comes. Ctrl-C asks the run to stop at its next round, whose last events are still read;
    a second one does not wait for them (a server may be slow to answer)."""
    record = LaneRecord(request.mode)
    events = thread.stream(lambda: source.generate(request, controls))
    while True:
        try:
            for event in events:
                record.add(event)
                if writer is not None:
                    writer.write_event(request.mode, event)
                on_event(request.mode, event)
            return record
        except KeyboardInterrupt:
            if controls.stop_requested:
                raise
            controls.request_stop()  # the engine ends at the next round; keep reading its last events
            on_interrupt()
        except BaseException:
            controls.request_stop()  # a session that cannot be written: the model thread stops too
            raise
