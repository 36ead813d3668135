"""The playground's logic without a screen: the lanes of a run, where live changes go, the session
being written, and saved sessions reopened. The Textual app draws what it decides, through the
small `View` protocol, and the screen reads the run through `RunReadout`: wiring in one direction,
and all of this tested without a terminal.

Threads: the model thread appends lane events to `inbox` (a deque append is thread-safe) and
tells the UI thread through the `Outbox` (the app posts each as a typed Textual message,
ui/messages.py): lane events arrived, once until the screen takes the batch; models loaded and
run ended, which the app hands back to `loaded` and `ended` on the UI thread, where everything
else here runs too. No Textual here: this is tested without a terminal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from specplay.config.model_sets import models_line
from specplay.config.run_config import RunConfig
from specplay.drafters import kind_named
from specplay.engine.capabilities import Capabilities
from specplay.engine.controls import LiveControls
from specplay.engine.costs import RoundCosts
from specplay.engine.events import DoneEvent, Event, RoundEvent, StartEvent, StepEvent
from specplay.engine.settings import (
    ADAPTIVE_ROUTE,
    AUTO_ROUTE,
    NONE_ROUTE,
    RESERVED_ROUTES,
    ROUTE_SETTINGS,
    SamplingParams,
    SpecSettings,
)
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError, SpecplayError, error_line
from specplay.runner.host import DRAFT_LANE, LANES, ModelHost
from specplay.runner.session_run import open_writer
from specplay.store import Session, SessionWriter, load_session
from specplay.store.changes import skipped_changes
from specplay.ui.stats import LaneTally


class RunState(Enum):
    UNLOADED = "not connected"
    """Nothing loaded or contacted yet: the first run loads the models (a session opened from vLLM
    servers reaches none of them until the user asks it to re-run)."""
    LOADING = "loading"
    FAILED = "failed"
    """The models did not load: nothing runs; the status line says why."""
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stopping"
    """Stop was asked: the lanes end at their next round."""
    MEASURING = "measuring round costs"
    """The models time a round's parts (engine/costs.py): no run until they are done."""

    @property
    def generating(self) -> bool:
        return self in (RunState.RUNNING, RunState.STOPPING)


ALL_LANES = (*LANES, DRAFT_LANE)
_SAMPLING_FIELDS = frozenset(SamplingParams.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class LaneItem:
    """One engine event of one lane, with that lane's own time so far (seconds of its turns) and, for
    a round, the text of each drafted token."""

    run_id: int
    lane: str
    event: Event
    busy_s: float
    drafted_text: tuple[str, ...]


class View(Protocol):
    """What the controller asks of the screen."""

    def show_status(self, text: str, error: bool = False) -> None: ...

    def notify_user(self, text: str, error: bool = False) -> None: ...

    def show_loaded(self, drafters: tuple[str, ...], capabilities: Capabilities) -> None:
        """The routes to offer, and which controls are live."""
        ...

    def show_load_failed(self) -> None:
        """Loading ended in an error (the status line holds it)."""
        ...

    def show_settings(self, settings: SpecSettings, seed: int) -> None:
        """Set the controls (a reopened session's settings)."""
        ...

    def show_prompt(self, text: str) -> None: ...

    def current_prompt(self) -> str: ...

    def show_draft_lane(self, shown: bool) -> None: ...

    def clear_lanes(self) -> None: ...

    def add_event(self, lane: str, event: Event, drafted_text: tuple[str, ...]) -> None:
        """Take an event into its lane (and the draft tape); shown at the next redraw."""
        ...

    def redraw(self, full: bool) -> None:
        """Show what was added; `full`: the whole texts, to scroll back and pick tokens."""
        ...

    def when_drawn(self, then: Callable[[], None]) -> None:
        """Call `then` after the screen's next refresh (usually after it has drawn what it was
        asked to so far)."""
        ...


class Outbox(Protocol):
    """What the controller tells the UI thread; callable from any thread."""

    def models_loaded(
        self, source: EventStream | None, identity: dict[str, Any], error: BaseException | None, autorun: bool
    ) -> None:
        """Loading ended; to be handed to `PlaygroundController.loaded` on the UI thread."""
        ...

    def run_ended(self, run_id: int, error: BaseException | None) -> None:
        """Every lane of a run ended; to be handed to `PlaygroundController.ended`."""
        ...

    def lane_events_arrived(self) -> None:
        """Lane events wait in the inbox for a frame."""
        ...

    def models_waiting(self) -> None:
        """The models wait at an event boundary for the frame asked for (runner/gate.py)."""
        ...

    def token_texts_arrived(self) -> None:
        """Token texts a server was asked for have arrived."""
        ...

    def costs_measured(self, costs: RoundCosts | None, error: BaseException | None) -> None:
        """A measurement of round costs ended; to be handed to `PlaygroundController.costs_measured`."""
        ...


class RunReadout(Protocol):
    """What the screen reads of the playground, and the frame commands it sends."""

    @property
    def state(self) -> RunState: ...

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lanes of the current (or last, or opened) run."""
        ...

    @property
    def tallies(self) -> Mapping[str, LaneTally]: ...

    @property
    def shown_capabilities(self) -> Capabilities:
        """The loaded source's, or, while a saved session is on show, the source's it ran on."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def settings(self) -> SpecSettings: ...

    @property
    def seed(self) -> int: ...

    @property
    def draft_lane(self) -> bool: ...

    @property
    def costs(self) -> RoundCosts | None:
        """What a round's parts cost here, once measured ("Measure round costs")."""
        ...

    def decode(self, token_id: int) -> str:
        """A token's text for the views (`<id>` while a server's is on its way)."""
        ...

    def drain(self) -> bool:
        """Take the queued lane events into the view; whether there were any."""
        ...

    def draw_between_turns(self) -> bool:
        """Ask the models to wait at their next event boundary (a ModelsWaiting message follows,
        ui/messages.py); False where lanes do not take turns: draw now."""
        ...

    def release_models(self) -> None:
        """The frame is drawn: the models go on."""
        ...


class PlaygroundController:
    """The state of the playground between the app's frames."""

    def __init__(self, config: RunConfig, host: ModelHost, outbox: Outbox, draft_lane: bool = False) -> None:
        """`attach` gives the controller its view."""
        self.config, self.host, self.outbox = config, host, outbox
        self.view: View | None = None
        host.on_decoded = outbox.token_texts_arrived
        self.settings = config.settings
        """What the controls say now: the next run starts with it."""
        self.seed = config.request.seed
        self.state = RunState.LOADING
        self.status = ""
        self.drafters: tuple[str, ...] = ()
        self.identity: dict[str, Any] = {}
        self.capabilities = Capabilities()
        self.route_map: dict[str, str] = {}
        """Router class to drafter, as the source resolved it at load (saved in sessions)."""
        self.costs: RoundCosts | None = None
        """A round's parts as last measured here: the lane's stats then say which k would pay."""
        self.run_id = 0
        self.controls: dict[str, LiveControls] = {}
        self.draft_lane = draft_lane
        self.lanes: tuple[str, ...] = LANES
        """The lanes of the current (or last) run, in session order."""
        self.events: dict[str, list[Event]] = {lane: [] for lane in ALL_LANES}
        """Every event of the current (or last) run, per lane: what the session records."""
        self.tallies: dict[str, LaneTally] = {lane: LaneTally() for lane in ALL_LANES}
        self.opened: Session | None = None
        """The session on show read-only, until the next run."""
        self.last_session: Path | None = None
        self.inbox: deque[LaneItem] = deque()
        """Filled by the model thread, drained by the UI in batches."""
        self._signalled = False
        """A LaneEventsArrived is on its way and the screen has not taken the batch yet."""
        self._writer: SessionWriter | None = None
        self._saving = True
        """False once this run's session could not be written: no later lane opens another."""
        self._unsaved: str | None = None
        """Why this run's session could not be written, said again when the run ends."""
        self._prompt = ""
        self._route_note = ""
        """Where the current run's route sent its prompt, for the status line."""
        self._closing = False
        """Set as the app quits: from then on nothing is drawn (its screen may be gone)."""

    def attach(self, view: View) -> None:
        self.view = view

    @property
    def _view(self) -> View:
        assert self.view is not None, "attach a view first"
        return self.view

    @property
    def shown_capabilities(self) -> Capabilities:
        return self.opened.capabilities if self.opened is not None else self.capabilities

    def decode(self, token_id: int) -> str:
        return self.host.decode(token_id)

    # --- loading -----------------------------------------------------------------------------

    def load(self, autorun: bool = False) -> None:
        """Load the models on the model thread; `autorun` runs the prompt once they are."""
        self.state = RunState.LOADING
        self.set_status("loading models…")
        self.host.load(lambda source, identity, error: self.outbox.models_loaded(source, identity, error, autorun))

    def load_on_run(self) -> None:
        """Load nothing until a run is asked for (ctrl+r then loads the models and runs)."""
        self.state = RunState.UNLOADED
        withheld = " (without the API key: the session, not this command line, names them)"
        note = withheld if self.config.vllm.key_withheld else ""
        shown = f"{opened_title(self.opened)}; " if self.opened is not None else ""
        faulty = self.opened is not None and opened_faulty(self.opened)
        self.set_status(f"{shown}ctrl+r connects to the servers{note} and runs", error=faulty)

    def loaded(
        self, source: EventStream | None, identity: dict[str, Any], error: BaseException | None, autorun: bool
    ) -> None:
        """UI thread: loading ended."""
        if error is not None:
            self.state = RunState.FAILED
            self._view.show_load_failed()
            self.set_status(f"models failed to load: {error_line(error)} (ctrl+q quits)", error=True)
            return
        assert source is not None
        self.drafters, self.identity, self.capabilities = source.drafters, identity, source.capabilities
        self.route_map = dict(source.route_map)
        self._view.show_loaded(self.drafters, self.capabilities)
        self.state = RunState.READY
        if self.opened is None:
            self.set_status(f"ready: {models_line(self.config, identity, self.route_map)}; ctrl+r runs")
        else:
            self._show_opened_settings(self.opened)
        if autorun:
            self.run()

    # --- round costs -------------------------------------------------------------------------

    def measure_costs(self) -> None:
        """Time the verify pass row count by row count, a target step and each drafter's step at
        the prompt's length, between runs; the speculative lane's stats then recommend a k."""
        prompt = self._view.current_prompt()
        if self.state != RunState.READY:
            self._view.notify_user(f"cannot measure round costs while {self.state.value}", error=True)
            return
        if not prompt.strip():
            self.set_status("type a prompt first: costs are measured at its length", error=True)
            return
        rows = max(self.settings.policy_params.k_max, self.settings.k) + 1
        self.state = RunState.MEASURING
        self.set_status(
            f"measuring round costs: the verify pass over 1..{rows} rows, a target step, each drafter's step…"
        )
        request = replace(self.config.request, prompt=prompt)
        self.host.measure_costs(request, self.settings, rows, self.outbox.costs_measured)

    def costs_measured(self, costs: RoundCosts | None, error: BaseException | None) -> None:
        """UI thread: the measurement ended."""
        self.state = RunState.READY
        if error is not None or costs is None:
            self.set_status(f"round costs not measured: {error_line(error) if error else 'no result'}", error=True)
            return
        self.costs = costs
        steps = ", ".join(
            f"{rows} rows {t.ms / costs.target_step_ms.ms:.2f}"
            for rows, t in costs.verify_ms.items()
            if rows in (2, 5, 9)
        )
        self.set_status(
            f"round costs measured (verify in target steps: {steps}); a run's stats now say which k would pay"
        )
        self._view.redraw(full=True)

    # --- runs --------------------------------------------------------------------------------

    def run(self) -> None:
        """Generate in every lane from the prompt on screen, with the controls' settings and seed."""
        prompt = self._view.current_prompt()
        if self.state == RunState.UNLOADED:
            self.load(autorun=True)
            return
        if self.state != RunState.READY:
            self._view.notify_user(f"cannot run while {self.state.value}", error=True)
            return
        if not prompt.strip():
            self.set_status("type a prompt first", error=True)
            return
        self.run_id += 1
        self.opened = None
        wanted = (*LANES, DRAFT_LANE) if self.draft_lane else LANES
        if self.draft_lane and (why := self._cannot_write(self._route_for(prompt, self.settings.route))):
            wanted = LANES
            self._view.notify_user(f"no draft-only lane: {why}")
        self.lanes = tuple(lane for lane in wanted if lane in self.capabilities.modes)
        self.controls = {
            lane: LiveControls(self.settings, self.drafters if lane != "target" else ()) for lane in self.lanes
        }
        self._clear()
        self._writer, self._saving, self._unsaved, self._prompt = None, True, None, prompt
        request = replace(self.config.request, prompt=prompt, seed=self.seed, mode="speculative")
        run_id = self.run_id
        self.state = RunState.RUNNING
        self._route_note = self._route_line(prompt)
        self.set_status(f"generating (seed {self.seed}) · {self._route_note}… escape stops")
        # The models start after the screen's next refresh, so the cleared lanes' layout, the
        # costliest frame of a run, mostly falls before them rather than in the lanes' time.
        self._view.when_drawn(
            lambda: self.host.start(
                request,
                self.controls,
                partial(self._arrived, run_id),
                lambda error: self.outbox.run_ended(run_id, error),
            )
        )

    def _arrived(self, run_id: int, lane: str, event: Event, busy_s: float, drafted: tuple[str, ...]) -> None:
        """Model thread: queue the event; tell the screen once until it takes the batch (`drain`
        clears the flag before it takes, so an event queued meanwhile is either taken or told)."""
        self.inbox.append(LaneItem(run_id, lane, event, busy_s, drafted))
        if not self._signalled:
            self._signalled = True
            self.outbox.lane_events_arrived()

    def draw_between_turns(self) -> bool:
        """Ask the models to wait at their next event boundary, where the outbox's `models_waiting`
        tells the screen to draw, until `release_models`; False where the lanes do not take turns
        on this machine (a server's stream in its own time): draw now."""
        if not self.capabilities.lanes_take_turns:
            return False
        self.host.gate.hold(self.outbox.models_waiting)
        return True

    def release_models(self) -> None:
        self.host.gate.release()

    def stop(self) -> None:
        if self.state != RunState.RUNNING:
            return
        for controls in self.controls.values():
            controls.request_stop()
        self.state = RunState.STOPPING
        self.set_status("stopping at the next round…")

    def drain(self) -> bool:
        """Take every queued item of the current run into the lanes; whether there was any."""
        self._signalled = False
        taken = 0
        while self.inbox:
            item = self.inbox.popleft()
            if item.run_id == self.run_id:
                self._take(item)
                taken += 1
        if taken and self._writer is not None:
            try:
                self._writer.flush()  # once per batch, not per event: the batch is what a redraw shows
            except SpecplayError as error:
                self._drop_writer(error)
        return taken > 0

    def _take(self, item: LaneItem, save: bool = True) -> None:
        event, lane = item.event, item.lane
        self.events[lane].append(event)
        if save:
            self._save(lane, event)
        self.tallies[lane].add(event, item.busy_s)
        self._view.add_event(lane, event, item.drafted_text)

    def _save(self, lane: str, event: Event) -> None:
        """Write an event to this run's session, opening it at the run's first start."""
        if self._saving and self._writer is None and isinstance(event, StartEvent):
            self._writer = self._open_writer(event)
        if self._writer is not None:
            try:
                self._writer.write_event(lane, event, flush=False)
            except SpecplayError as error:  # a full disk: the run goes on, what was written is kept
                self._drop_writer(error)

    def _open_writer(self, start: StartEvent) -> SessionWriter | None:
        request = replace(self.config.request, prompt=self._prompt, seed=start.seed, mode="speculative")
        try:
            return open_writer(
                self.config,
                request,
                prompt_token_ids=start.prompt_token_ids,
                lanes=list(self.lanes),
                identity=self.identity,
                capabilities=self.capabilities,
                route_map=self.route_map,
                token_text=self.host.decode if self.capabilities.local_token_text else None,
                source="tui",
                lanes_run_side_by_side=True,
            )
        except SpecplayError as error:  # the run goes on unsaved
            self._not_saving(error)
            return None

    def _drop_writer(self, error: SpecplayError) -> None:
        assert self._writer is not None
        self._writer.close()
        self._writer = None
        self._not_saving(error)

    def _not_saving(self, error: SpecplayError) -> None:
        self._saving, self._unsaved = False, error_line(error)
        self.set_status(f"not saving: this run will not be saved: {self._unsaved}", error=True)

    def ended(self, run_id: int, error: BaseException | None) -> None:
        """UI thread: every lane of a run ended."""
        if run_id != self.run_id:
            return
        self.release_models()  # a frame asked for after the last event is drawn below
        self.state = RunState.READY
        self.drain()  # events still queued belong before the end
        self._view.redraw(full=True)
        saved = ""
        if self._writer is not None:
            try:
                if error is None:
                    self.last_session = self._writer.finalize()
                    saved = f"; saved {self.last_session.name}"
            except SpecplayError as failure:
                saved = f"; not saved: {error_line(failure)}"
            self._writer.close()
            self._writer = None
        if self._unsaved is not None:
            saved = f"; NOT saved: {self._unsaved}"
        if error is not None:
            self.set_status(f"run failed: {error_line(error)}{saved if self._unsaved else ''}", error=True)
        else:
            finish = self.tallies["speculative"].finish_reason or "done"
            text = f"finished ({finish}) · {self._route_note}{saved}; ctrl+r runs again"
            self.set_status(text, error=self._unsaved is not None or saved.startswith("; not saved"))

    def _clear(self) -> None:
        self.events = {lane: [] for lane in ALL_LANES}
        self.tallies = {lane: LaneTally() for lane in ALL_LANES}
        self._view.clear_lanes()

    # --- live controls -----------------------------------------------------------------------

    def change(self, setting: str, value: Any) -> None:
        """A control moved: `setting` is a SpecSettings field name, 'seed' or 'draft_lane'."""
        if setting == "seed":
            self.seed = int(value)
            return
        if setting == "draft_lane":
            self.draft_lane = bool(value)
            self._view.show_draft_lane(self.draft_lane)
            if self.state.generating and self.draft_lane != (DRAFT_LANE in self.lanes):
                self._view.notify_user("the draft-only lane changes from the next run")
            return
        try:
            new = self.settings.changed(**{setting: value})
            if self.drafters:
                LiveControls(new, self.drafters)  # checks the route
        except ConfigError as error:
            self._view.notify_user(error_line(error), error=True)
            return
        if new == self.settings:
            return
        self.settings = new
        if not self.state.generating:
            return
        if not self.capabilities.live_controls:  # a request's settings are the server's from its first token
            self._view.notify_user("these settings are the server's: changes apply from the next run")
            return
        # The speculative lane takes every change; the target-only lane only sampling changes,
        # so the two lanes keep sampling the same distribution.
        # The draft-only lane takes the route too, so it shows the drafter now serving.
        lanes = self.lanes if setting in _SAMPLING_FIELDS else ("speculative",)
        if setting == "route" and DRAFT_LANE in self.lanes:
            if why := self._cannot_write(self._route_for(self._prompt, value)):
                self._view.notify_user(f"the draft-only lane keeps its drafter: {why}")
            else:
                lanes += (DRAFT_LANE,)
        running = [lane for lane in lanes if not self._lane_ended(lane)]
        if not running:  # the control moved, but no lane it reaches is still generating
            self._view.notify_user("the lanes this change goes to have ended: it applies from the next run")
        for lane in running:
            self.controls[lane].update(**{setting: value})

    def _lane_ended(self, lane: str) -> bool:
        """Whether `lane`'s last event shown is its end (a later change cannot reach it)."""
        events = self.events.get(lane)
        return bool(events) and isinstance(events[-1], DoneEvent)

    def _route_line(self, prompt: str) -> str:
        """Where the speculative lane's route sends this prompt: auto says which class it saw and
        how that class reached its drafter; a pinned route says so."""
        source = self.host.source
        if self.settings.route == ADAPTIVE_ROUTE and source is not None:
            first = source.route_choice(prompt).drafter
            return f"adaptive: a drafter each round, from what the run measures (first {first})"
        if self.settings.route == NONE_ROUTE:
            return "route none: no speculation, each round a target step"
        if self.settings.route != AUTO_ROUTE or source is None:
            return f"route {self.settings.route} (pinned)"
        return source.route_choice(prompt).describe()

    def _route_for(self, prompt: str, route: str) -> str:
        """The drafter a route setting picks for `prompt` (adaptive: the one it starts from)."""
        source = self.host.source
        return source.route_choice(prompt).drafter if route in ROUTE_SETTINGS and source is not None else route

    def _cannot_write(self, route: str) -> str | None:
        """Why a draft-only lane cannot run on `route` (None: it can)."""
        kind = kind_named(route, self.config.drafters)
        return kind.cannot_write if kind is not None else None

    # --- saved sessions ----------------------------------------------------------------------

    def open_session(self, path: Path) -> None:
        """Show a saved session read-only: its prompt, lanes, tape and stats as they were."""
        if self.state.generating:
            self._view.notify_user("stop the run before opening a session", error=True)
            return
        try:
            session = load_session(path)
        except SpecplayError as error:
            self.set_status(error_line(error), error=True)
            return
        self.run_id += 1  # anything still queued from an earlier run is dropped
        self.opened = session
        self._clear()
        self._view.show_prompt(session.prompt)
        self.lanes = tuple(lane for lane in session.header["lanes"] if lane in ALL_LANES)
        if DRAFT_LANE in self.lanes and not self.draft_lane:
            self.change("draft_lane", True)
        for lane in self.lanes:
            busy_s = 0.0
            for event in session.lanes[lane].events if lane in session.lanes else ():
                busy_s += _event_seconds(event)
                drafted = tuple(map(self.host.decode, event.drafted)) if isinstance(event, RoundEvent) else ()
                self._take(LaneItem(self.run_id, lane, event, busy_s, drafted), save=False)
        self._view.redraw(full=True)
        if self.state == RunState.READY:
            self._show_opened_settings(session)
        elif self.state == RunState.UNLOADED:
            self.load_on_run()
        else:
            self.set_status(f"{opened_title(session)}; loading models to re-run it…", error=opened_faulty(session))

    def _show_opened_settings(self, session: Session) -> None:
        """Put the session's settings in the controls, so a run re-runs it."""
        settings = session.main.settings
        if settings.route not in RESERVED_ROUTES and settings.route not in self.drafters:
            settings = settings.changed(route=AUTO_ROUTE)
        self.settings = settings
        self.seed = int((session.header.get("request") or {}).get("seed", self.seed))
        self._view.show_settings(settings, self.seed)
        text = f"{opened_title(session)}; ctrl+r re-runs it with these settings"
        self.set_status(text, error=opened_faulty(session))

    def rerun_session(self) -> bool:
        """Put the opened session back in the controls and prompt; False when none is open."""
        if self.opened is None:
            self._view.notify_user("no session is open", error=True)
            return False
        self._view.show_prompt(self.opened.prompt)
        if self.state == RunState.READY:
            self._show_opened_settings(self.opened)
        return True

    # --- status and exit ---------------------------------------------------------------------

    def set_status(self, text: str, error: bool = False) -> None:
        self.status = text
        if not self._closing and self.view is not None:  # the screen may be gone, or not up yet
            self.view.show_status(text, error)

    def close(self) -> None:
        self._closing = True
        for controls in self.controls.values():
            controls.request_stop()
        try:
            # Events wait for the next frame (up to a second on a busy machine): they are saved too.
            while self.inbox:
                item = self.inbox.popleft()
                if item.run_id == self.run_id:
                    self._save(item.lane, item.event)
        finally:
            if self._writer is not None:
                self._writer.close()  # incomplete, but every event so far is on disk
            self._writer, self._saving = None, False
            self.host.close()


def opened_title(session: Session) -> str:
    """An opened session in the status line: read-only, and the first of its live changes that
    cannot be applied (a newer specplay's setting, or an edit): shown on the tape, skipped."""
    complete = "" if session.complete else " (incomplete)"
    skipped = skipped_changes(session.lanes.values())
    more = f", and {len(skipped) - 1} more" if len(skipped) > 1 else ""
    note = f" ({skipped[0]}{more}; a newer specplay wrote it, or the file was edited)" if skipped else ""
    return f"session {session.id}{complete}, read-only{note}"


def opened_faulty(session: Session) -> bool:
    """Whether an opened session records a live change that cannot be applied."""
    return bool(skipped_changes(session.lanes.values()))


def _event_seconds(event: Event) -> float:
    """The lane time an event accounts for, as recorded (sessions keep no lane clock)."""
    if isinstance(event, RoundEvent):
        return (event.draft_ms + event.verify_ms + event.overhead_ms) / 1000
    if isinstance(event, StepEvent):
        return event.step_ms / 1000
    return 0.0
