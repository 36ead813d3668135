"""The model thread and what lives on it for the playground: the event stream, and runs of its
lanes side by side.

Nothing here touches Textual: results go through callbacks, which the app points at
post_message (thread-safe). MLX state belongs to the thread that made it, so the stream is
opened on the model thread from the configuration, never passed in already loaded.
"""

from __future__ import annotations

import gc
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import Any

import specplay.backends as backends
from specplay.config.run_config import RequestConfig, RunConfig
from specplay.engine.conversation import Exchange
from specplay.engine.costs import SHORT_DRAFT, RoundCosts, measure_costs, measure_drafting
from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError, SpecplayError
from specplay.runner.gate import TurnGate
from specplay.runner.lanes import LaneClock, side_by_side
from specplay.runner.thread import ModelThread

LANES = ("speculative", "target")
"""Session lane order: the speculative lane first, then its target-only comparison."""
CLOSE_WAIT_S = 5.0
"""Quitting waits this long for the model thread (a run stops at its next round); one stuck on a
server's reply is left behind, so the playground never hangs on its way out."""
DRAFTING_TOKENS = 32
"""Tokens of the run at the lane's k that measures the routed drafter's rounds for "Measure round
costs", or four rounds' worth at a k above 7 (the run at k 1 takes half as many): few, since a slow
drafter that is seldom kept (SmolLM2's early exit) spends a round of k drafts on about one token."""
DRAFT_LANE = "draft"
"""The optional third lane: the routed drafter alone."""

OnEvent = Callable[[str, Event, float, tuple[str, ...]], None]
"""(lane, event, the lane's own seconds so far, the text of each drafted token of a round)."""
OnLoaded = Callable[[EventStream | None, dict[str, Any], BaseException | None], None]
"""(stream, its description, error): called on the model thread once loading ends."""


def unknown_text(token_id: int) -> str:
    """What a view shows for a token whose text is not known (yet)."""
    return f"<{token_id}>"


OpenStream = Callable[[RunConfig], EventStream]
"""How a host opens its stream on the model thread: `backends.open_stream`, or a stand-in's own (the tests')."""


class ModelHost:
    def __init__(
        self, config: RunConfig, clock: Callable[[], float] = time.perf_counter, open_stream: OpenStream | None = None
    ) -> None:
        """`open_stream` replaces `backends.open_stream`; a stream opened so cleans up in its own `close`."""
        self.config = config
        self.stream: EventStream | None = None
        self._clock = clock
        self._open = open_stream or backends.open_stream
        self._cleanup = backends.thread_cleanup(config) if open_stream is None else None
        # Between runs other work may start or stop: the thread count is fitted again before each.
        self._refit = partial(backends.refit_blas_threads, config) if open_stream is None else None
        self.thread = ModelThread(on_exit=self._release)
        self.on_decoded: Callable[[], None] | None = None
        """Called from a background thread when a server's token text arrives (see `decode`)."""
        self._texts: dict[int, str] = {}
        self._asked: set[int] = set()
        self._to_decode: queue.Queue[int | None] = queue.Queue()
        self._decoder: threading.Thread | None = None
        self.gate = TurnGate()
        """Where lanes take turns on this machine, the screen draws between them (gate.py)."""

    def _release(self) -> None:
        """On the model thread, as it ends."""
        if self.stream is not None:
            self.stream.close()
        # What loading froze (load below) is collectable again: a process that opens another host
        # (a benchmark, the tests) would otherwise keep every closed host's models.
        gc.unfreeze()
        if self._cleanup is not None:
            self._cleanup()

    def load(self, done: OnLoaded) -> None:
        """Open the configured stream on the model thread; `done` is called there."""

        def load() -> tuple[EventStream, dict[str, Any]]:
            self.stream = self._open(self.config)
            # What exists now (models, tokenizer, the screen) lives as long as the host: frozen out
            # of the collector, so a full collection during a run, which may fall on any thread
            # and stalls it, walks only what runs made (tens of ms in the playground otherwise).
            gc.collect()
            gc.freeze()
            return self.stream, self.stream.describe()

        def finished(future: Future[tuple[EventStream, dict[str, Any]]]) -> None:
            if error := future.exception():
                done(None, {}, error)
            else:
                done(*future.result(), None)

        self.thread.submit(load).add_done_callback(finished)

    def start(
        self,
        request_config: RequestConfig,
        controls: Mapping[str, LiveControls],
        on_event: OnEvent,
        on_end: Callable[[BaseException | None], None],
        earlier: Mapping[str, Sequence[Exchange]] | None = None,
    ) -> None:
        """Run the lanes named in `controls` (each lane's name is its engine mode) on the model
        thread; the speculative lane inspects, so its tokens can be drilled into. Where the
        lanes' models share this machine they take turns event by event, each timed by its own
        turns; a server that streams each lane in its own time runs them one after the other.
        `earlier`: the prompt is a conversation's next turn, and each lane continues its own
        conversation, these its earlier exchanges (its own answers), its caches kept from its last
        turn; None: a new conversation."""

        def run() -> None:
            stream = self.stream
            assert stream is not None and request_config.prompt is not None
            if self._refit is not None:  # before the first event: the session records the count
                self._refit("as the run started")
            lanes: dict[str, tuple[LaneClock, Iterator[Event]]] = {}
            for lane in controls:
                clock = LaneClock(self._clock)
                before = earlier.get(lane, ()) if earlier is not None else ()
                # pipeline=False: lanes on one device may not compute on another's time.
                request = Request(
                    prompt=request_config.prompt,
                    prompt_token_ids=tuple(stream.encode(request_config.prompt, request_config.raw, before)),
                    mode=lane,  # type: ignore[arg-type]
                    seed=request_config.seed,
                    max_tokens=request_config.max_tokens,
                    ignore_eos=request_config.ignore_eos,
                    pipeline=False,
                    continues=earlier is not None,
                    inspect=lane == "speculative",
                )
                lanes[lane] = (clock, stream.generate(request, controls[lane], clock))
            take_turns = stream.capabilities.lanes_take_turns
            for lane, event in side_by_side(lanes) if take_turns else _in_turn(lanes):
                drafted = tuple(map(stream.token_text, event.drafted)) if isinstance(event, RoundEvent) else ()
                on_event(lane, event, lanes[lane][0](), drafted)
                if take_turns:  # no lane's clock runs here (a server's lane streams in its own time)
                    self.gate.between_turns()

        def finished(future: Future[None]) -> None:
            on_end(future.exception())

        self.thread.submit(run).add_done_callback(finished)

    def measure_costs(
        self,
        request_config: RequestConfig,
        settings: SpecSettings,
        max_rows: int,
        route: str,
        done: Callable[[RoundCosts | None, BaseException | None], None],
        earlier: Sequence[Exchange] = (),
    ) -> None:
        """Time what a round costs at the prompt's length, on the model thread (between runs), and
        the rounds of `route` where it is a drafter; `done` is called there with the costs or the
        error. `earlier`: the prompt follows up these exchanges (a lane's conversation so far), so
        it is encoded after them, as the next turn's lane encodes it: the costs are that length's."""

        def measure() -> RoundCosts:
            stream = self.stream
            if not isinstance(stream, SpecEngine):  # a speculating server runs its own rounds
                raise ConfigError("costs", "cannot be measured here: the server runs the rounds itself")
            kept = dict(stream.kept)  # a conversation's caches: its next turn still goes on from them
            try:
                return timed(stream)
            finally:
                stream.kept.clear()
                stream.kept.update(kept)

        def timed(stream: SpecEngine) -> RoundCosts:
            assert request_config.prompt is not None
            if self._refit is not None:
                self._refit("as the measurement started")
            ids = stream.encode(request_config.prompt, request_config.raw, earlier)
            rule = settings.acceptance_rule
            # The playground's lanes take turns and do not pipeline: the target step is timed alike.
            costs = measure_costs(stream, ids, settings.sampling, rule, max_rows=max_rows, pipeline=False)
            # A lane's rounds are all of one k: the line through rounds at two k, drawn here, says
            # what a drafted token costs in them, which the step timed alone can understate.
            in_rounds = measure_drafting(
                stream,
                ids,
                settings,
                [route],
                k=max(settings.k, SHORT_DRAFT + 1),
                max_tokens=max(DRAFTING_TOKENS, 4 * (settings.k + 1)),  # rounds near the end are left out
                target_step_ms=costs.target_step_ms.ms,
                pipeline=False,
            )
            return replace(costs, draft_step_in_rounds_ms=in_rounds)

        def finished(future: Future[RoundCosts]) -> None:
            error = future.exception()
            done(None if error else future.result(), error)

        self.thread.submit(measure).add_done_callback(finished)

    def close(self) -> None:
        self.gate.release()
        self._to_decode.put(None)
        self.thread.close(wait_s=CLOSE_WAIT_S)

    def decode(self, token_id: int) -> str:
        """One token's text, for drill-down views; called on the UI thread (waiting for the model
        thread would mean waiting for the run to end). From a local tokenizer at once; from a
        server's, the text when known, else `<id>` while a background thread asks the server
        (then `on_decoded` is called, on that thread, for the view to show it)."""
        stream = self.stream
        if stream is None:
            return unknown_text(token_id)
        if stream.capabilities.local_token_text:
            return stream.token_text(token_id)
        if (text := self._texts.get(token_id)) is not None:
            return text
        if token_id not in self._asked:
            self._asked.add(token_id)
            if self._decoder is None:
                # A daemon: quitting never waits on a server's reply (a pool's workers are joined at exit).
                self._decoder = threading.Thread(target=self._fetch_texts, args=(stream,), daemon=True)
                self._decoder.start()
            self._to_decode.put(token_id)
        return unknown_text(token_id)

    def _fetch_texts(self, stream: EventStream) -> None:
        while (token_id := self._to_decode.get()) is not None:
            try:
                self._texts[token_id] = stream.token_text(token_id)
            except SpecplayError:  # an unreachable server: the id stays on show, asked again next time
                self._asked.discard(token_id)
                continue
            if self.on_decoded is not None:
                self.on_decoded()


def _in_turn(lanes: Mapping[str, tuple[LaneClock, Iterator[Event]]]) -> Iterator[tuple[str, Event]]:
    """Each lane to its end, one after the other, its clock running throughout."""
    for lane, (clock, events) in lanes.items():
        clock.resume()
        for event in events:
            yield lane, event
        clock.pause()
