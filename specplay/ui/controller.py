"""The playground's logic without a screen: the lanes of a run (ui/lane_run.py), the conversation
it starts or continues and its session (ui/turns.py), where live changes go, and saved sessions
reopened. The app draws what it decides through the small `View` protocol (given by `attach`);
the screen reads the run through `RunReadout`.

Threads: the model thread appends lane events to `inbox` (a deque append is thread-safe) and tells
the UI thread through the `Outbox` (typed Textual messages, ui/messages.py); the app hands models
loaded and run ended back to `loaded` and `ended`: everything here runs on the UI thread.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from specplay.config.capabilities import capabilities_of
from specplay.config.model_sets import models_line
from specplay.config.run_config import RunConfig
from specplay.drafters import cannot_write
from specplay.engine.capabilities import Capabilities
from specplay.engine.costs import RoundCosts
from specplay.engine.events import Event
from specplay.engine.live_controls import checked_change
from specplay.engine.routers.routing import RouteChoice, describe_route
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError, error_line
from specplay.runner.host import DRAFT_LANE, LANES, ModelHost
from specplay.runner.recording import RunRecorder
from specplay.store import Session
from specplay.ui.costs_ask import costs_ask, measured_words
from specplay.ui.lane_board import ALL_LANES, LaneBoard
from specplay.ui.lane_run import LaneRun, draft_lane_switched, first_lanes, route_choice, routed_drafter
from specplay.ui.opened import opened_settings, opened_status
from specplay.ui.pending_run import PendingRun
from specplay.ui.protocols import Outbox, RunState, View
from specplay.ui.stats import LaneTally
from specplay.ui.turns import Conversation


class PlaygroundController:
    """The state of the playground between the app's frames."""

    def __init__(self, config: RunConfig, host: ModelHost, outbox: Outbox, draft_lane: bool = False) -> None:
        self.config, self.host, self.outbox = config, host, outbox
        self.view: View | None = None
        host.on_decoded = outbox.token_texts_arrived
        self.settings = config.settings  # what the controls say now: the next run starts with it
        self.seed = config.request.seed
        self.state = RunState.LOADING
        self.status = ""
        self.drafters: tuple[str, ...] = ()
        self.identity: dict[str, Any] = {}
        self.capabilities = capabilities_of(config)  # what the backend asked for says, until it loads
        self.route_map: dict[str, str] = {}  # router class to drafter, as resolved at load (saved in sessions)
        self.costs: RoundCosts | None = None
        """A round's parts as last measured here: the lane's stats then say which k would pay."""
        self.run_id = 0
        self.lane_run: LaneRun | None = None  # the current (or last) run: its prompt, each lane's live controls
        self.draft_lane = draft_lane
        self.lanes: tuple[str, ...] = LANES  # the current (or last) run's, in session order
        self.board = LaneBoard(outbox.lane_events_arrived)
        """The current (or last) run's events and tallies, per lane, and the queue to the screen."""
        self.conversation = Conversation(self.board, lambda: self._view)  # turns on show, their session (ui/turns.py)
        self.opened: Session | None = None  # the session on show read-only, until the next run
        self.last_session: Path | None = None
        self._route_note = ""  # where the current run's route sent its prompt, for the status line
        self.pending = PendingRun()
        self._closing = False  # set as the app quits: from then on nothing is drawn (its screen may be gone)

    @property
    def events(self) -> dict[str, list[Event]]:
        return self.board.events

    @property
    def tallies(self) -> dict[str, LaneTally]:
        return self.board.tallies

    def turn_tallies(self, lane: str) -> list[LaneTally]:
        return self.board.turn_tallies(lane)

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
        self.set_status(self.pending.words())
        self.host.load(lambda stream, identity, error: self.outbox.models_loaded(stream, identity, error, autorun))

    def load_on_run(self) -> None:
        """Load nothing until a run is asked for (ctrl+r then loads the models and runs)."""
        if self.pending.kept:  # ctrl+r came before the screen was up
            self.load(autorun=True)
            return
        self.state = RunState.UNLOADED
        withheld = " (without the API key: the session, not this command line, names them)"
        note = withheld if self.config.vllm.key_withheld else ""
        title, faulty = opened_status(self.opened) if self.opened is not None else ("", False)
        shown = f"{title}; " if title else ""
        self.set_status(f"{shown}ctrl+r connects to the servers{note} and runs", error=faulty)

    def loaded(
        self, stream: EventStream | None, identity: dict[str, Any], error: BaseException | None, autorun: bool
    ) -> None:
        """UI thread: loading ended."""
        autorun = self.pending.take() or autorun
        if error is not None:
            self.state = RunState.FAILED
            self._view.show_load_failed()
            self.set_status(f"models failed to load: {error_line(error)} (ctrl+q quits)", error=True)
            return
        assert stream is not None
        self.drafters, self.identity, self.capabilities = stream.drafters, identity, stream.capabilities
        self.route_map = dict(stream.routing.route_map)
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
        """Time the verify pass by rows, a target step and the drafters, at the next turn's length (for k)."""
        prompt = self._view.current_prompt()
        if self.state != RunState.READY:
            self._view.notify_user(f"cannot measure round costs while {self.state.value}", error=True)
            return
        if not prompt.strip():
            self.set_status("type a prompt first: costs are measured at its length", error=True)
            return
        ask = costs_ask(self.config.request, self.settings, self.host.stream, self.conversation, prompt)
        self.state = RunState.MEASURING
        self.set_status(ask.words())
        ask.start(self.host, self.outbox.costs_measured)

    def costs_measured(self, costs: RoundCosts | None, error: BaseException | None) -> None:
        """UI thread: the measurement ended."""
        self.state = RunState.READY
        if error is not None or costs is None:
            self.set_status(f"round costs not measured: {error_line(error) if error else 'no result'}", error=True)
            return
        self.costs = costs
        self.set_status(measured_words(costs))
        self._view.redraw(full=True)

    # --- runs --------------------------------------------------------------------------------

    def run(self) -> None:
        """Generate in every lane from the prompt on screen, with the controls' settings and seed:
        the conversation's next turn where the prompt follows up (ui/turns.py), else a new
        conversation's first."""
        if self.state == RunState.UNLOADED:
            self.load(autorun=True)
            return
        if self.state == RunState.LOADING:
            self.set_status(self.pending.toggle(not self.pending.kept))
            return
        if self.state != RunState.READY:
            self._view.notify_user(f"cannot run while {self.state.value}", error=True)
            return
        prompt = self._view.current_prompt()
        if not prompt.strip():
            self.set_status("type a prompt first", error=True)
            return
        follows = self.conversation.follows_up(prompt)
        opened = self.opened if self.opened is not None and prompt == self.opened.prompt and not follows else None
        self._run(prompt, follows, [turn.prompt for turn in opened.turns[1:]] if opened else [])  # a re-run: every turn

    def _run(self, prompt: str, follows: bool, queued: list[str] | None = None) -> None:
        """A conversation's next turn (`follows`), or a new conversation's first, `queued` its later prompts."""
        if follows and (why := self.conversation.refusal(lambda: self._draft_cannot(prompt, self.settings.route))):
            self.conversation.queued.clear()
            self.set_status(why, error=True)
            return
        self.run_id += 1
        self.opened = None
        choice = route_choice(self.host.stream, prompt, self.settings.route)  # its session records it
        if follows:
            self.conversation.next_turn(prompt, choice)
        else:
            self._new_conversation(prompt, queued or [], choice)
        run = self.lane_run = LaneRun(self.run_id, prompt, self.lanes, self.settings, self.drafters)
        request = replace(self.config.request, prompt=prompt, seed=self.seed, mode="speculative")
        earlier = self.conversation.earlier() if follows else None
        self.state = RunState.RUNNING
        self._say_route(choice)
        ended = partial(self.outbox.run_ended, run.run_id)
        # The models start after the screen's next refresh, so the cleared lanes' layout, the
        # costliest frame of a run, mostly falls before them rather than in the lanes' time.
        self._view.when_drawn(lambda: run.start(self.host, request, self.board, ended, earlier))

    def _new_conversation(self, prompt: str, queued: list[str], choice: RouteChoice | None) -> None:
        """The lanes of a conversation's first turn, cleared, and its session (`choice`: the route's)."""
        draft_cannot = self._draft_cannot(prompt, self.settings.route) if self.draft_lane else None
        self.lanes, notice = first_lanes(self.draft_lane, draft_cannot, self.capabilities.modes)
        if notice:
            self._view.notify_user(notice)
        recorder = RunRecorder(
            self.config,
            prompt=prompt,
            lanes=self.lanes,
            identity=self.identity,
            capabilities=self.capabilities,
            route_map=self.route_map,
            token_text=self.host.decode if self.capabilities.local_token_text else None,
            on_unsaved=lambda why: self.set_status(f"not saving: this run will not be saved: {why}", error=True),
            route_choice=choice,
        )
        self.conversation.begin(self.lanes, recorder, queued)

    def _draft_cannot(self, prompt: str, route: str) -> str | None:
        """Why a draft-only lane cannot write on the drafter `route` picks for `prompt` (None: it can)."""
        return cannot_write(routed_drafter(self.host.stream, prompt, route), self.config.drafters)

    def new_conversation(self) -> None:
        """Forget the turns so far (and a session on show): the next run starts a conversation."""
        if self.state.generating:
            self._view.notify_user("stop the run before starting a new conversation", error=True)
            return
        self.run_id += 1  # anything still queued from an earlier run is dropped
        self.opened = None
        self.conversation.forget()
        self._view.redraw(full=True)
        if self.state == RunState.READY:
            self.set_status("new conversation: ctrl+r runs the prompt as its first turn")
        else:
            self._view.notify_user("new conversation: the next run is its first turn")

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
        if self.state == RunState.LOADING and self.pending.kept:
            self.set_status(self.pending.toggle(False))
            return
        if self.state != RunState.RUNNING or self.lane_run is None:
            return
        self.lane_run.stop()
        self.state = RunState.STOPPING
        self.set_status("stopping at the next round…")

    def drain(self) -> bool:
        """Take every queued item of the current run into the lanes; whether there was any."""
        return self.conversation.drain(self.run_id)

    def ended(self, run_id: int, error: BaseException | None) -> None:
        """UI thread: every lane of a run ended; the conversation takes the turn, or ends with a
        failed one."""
        if run_id != self.run_id:
            return
        stopped, turn = self.state == RunState.STOPPING, self.conversation.turn_words()
        self.release_models()  # a frame asked for after the last event is drawn below
        self.state = RunState.READY
        self.drain()  # events still queued belong before the end
        self._view.redraw(full=True)
        assert self.lane_run is not None
        path, saved, failed = self.conversation.end_turn(self.lane_run.prompt, error)
        self.last_session = path or self.last_session
        finish = self.tallies["speculative"].finish_reason or "done"
        if error is None and self.conversation.queued and not stopped:  # a saved conversation's re-run
            prompt = self.conversation.queued.pop(0)
            self._view.show_prompt(prompt)
            self._run(prompt, follows=True)
            return
        self.conversation.queued.clear()
        self._view.offer_follow_up()
        words = self.conversation.ended_words(turn, error, finish, self._route_note, saved)
        self.set_status(words, error=failed or error is not None)

    # --- live controls -----------------------------------------------------------------------

    def change(self, setting: str, value: Any) -> None:
        """A control moved: `setting` is a SpecSettings field name, 'seed' or 'draft_lane'."""
        if setting == "seed":
            self.seed = int(value)
            return
        if setting == "draft_lane":
            self.draft_lane = bool(value)
            switched = (self.draft_lane, self.lanes, self.state.generating, bool(self.conversation))
            note, notice = draft_lane_switched(*switched)
            self._view.show_draft_lane(self.draft_lane, note=note)
            if notice:
                self._view.notify_user(notice)
            return
        try:
            change = checked_change(self.settings, self.drafters, **{setting: value}).supported_by(self.capabilities)
        except Exception as error:  # a refusal (a ConfigError), or a value no check expects: never a crash
            odd = f"{setting} not changed: {repr(value)[:40]} is not a value it takes: "
            self._view.notify_user(("" if isinstance(error, ConfigError) else odd) + error_line(error), error=True)
            return
        if change.settings == self.settings:
            return
        self.settings = change.settings
        if not self.state.generating:
            return
        if not self.capabilities.live_controls:  # a request's settings are the server's from its first token
            self._view.notify_user("these settings are the server's: changes apply from the next run")
            return
        assert self.lane_run is not None
        prompt = self.lane_run.prompt
        draft_cannot = self._draft_cannot(prompt, value) if setting == "route" else None
        running, notices = self.lane_run.apply(change, setting, draft_cannot, self.board.ended)
        for notice in notices:
            self._view.notify_user(notice)
        if setting == "route" and "speculative" in running:
            self._say_route(route_choice(self.host.stream, prompt, self.settings.route))

    def _say_route(self, choice: RouteChoice | None) -> None:
        """The status line while a run goes: where the speculative lane's route sends its prompt."""
        self._route_note = describe_route(self.settings.route, choice)
        turn = self.conversation.turn_words()
        self.set_status(f"generating{turn} (seed {self.seed}) · {self._route_note}… escape stops")

    # --- saved sessions ----------------------------------------------------------------------

    def open_session(self, session: Session) -> None:
        """Show a saved session read-only: its prompt, lanes, tape and stats as they were, every
        turn of a conversation below the one before (the screen reads the file: ui/opened.py)."""
        if self.state.generating:
            self._view.notify_user("stop the run before opening a session", error=True)
            return
        self.run_id += 1  # anything still queued from an earlier run is dropped
        self.opened = session
        self.conversation.forget()
        self._view.show_prompt(session.prompt)
        self.lanes = tuple(lane for lane in session.header["lanes"] if lane in ALL_LANES)
        if DRAFT_LANE in self.lanes and not self.draft_lane:
            self.change("draft_lane", True)
        self.conversation.show_saved(session, self.lanes, self.run_id, self.host.decode)
        self._view.redraw(full=True)
        if self.state == RunState.READY:
            self._show_opened_settings(session)
        elif self.state == RunState.UNLOADED:
            self.load_on_run()
        else:
            title, faulty = opened_status(session)
            self.set_status(f"{title}; loading models to re-run it…", error=faulty)

    def _show_opened_settings(self, session: Session) -> None:
        """Put the session's settings in the controls, so a run re-runs it."""
        self.settings, self.seed = opened_settings(session, self.drafters, self.seed)
        self._view.show_settings(self.settings, self.seed)
        title, faulty = opened_status(session)
        self.set_status(f"{title}; ctrl+r re-runs it with these settings", error=faulty)

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
        if self.lane_run is not None:
            self.lane_run.stop()
        try:
            self.conversation.close(self.run_id)  # every event so far is on disk
        finally:
            self.host.close()
