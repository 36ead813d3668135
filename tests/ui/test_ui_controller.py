"""The playground's controller without a terminal, on the scripted backend: loading, runs, where
live changes go, frames between the models' turns, sessions."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specplay.config.run_config import RunConfig
from specplay.engine.capabilities import Capabilities
from specplay.engine.conversation import Exchange
from specplay.engine.events import ControlEvent, DoneEvent, Event, RoundEvent, StartEvent
from specplay.engine.settings import SpecSettings
from specplay.runner.host import ModelHost
from specplay.store import list_session_files, load_session
from specplay.ui.controller import PlaygroundController
from specplay.ui.opened import open_saved
from specplay.ui.protocols import LaneItem, RunState
from tests.support.checks import every
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import SCRIPTED, Cost, scripted_backend
from tests.support.ui_helpers import RoundHold, scripted_config, scripted_stream, server_config


class Screen:
    """Records what the controller asks of the view."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self.calls: list[tuple[str, Any]] = []
        self.events: dict[str, list[Event]] = {}
        self.draft_note = ""

    def show_status(self, text: str, error: bool = False) -> None:
        self.calls.append(("status", (text, error)))

    def notify_user(self, text: str, error: bool = False) -> None:
        self.calls.append(("notify", (text, error)))

    def show_loaded(self, drafters: tuple[str, ...], capabilities: Capabilities) -> None:
        self.calls.append(("loaded", (drafters, capabilities)))

    def show_load_failed(self) -> None:
        self.calls.append(("load_failed", None))

    def show_settings(self, settings: SpecSettings, seed: int) -> None:
        self.calls.append(("settings", (settings, seed)))

    def show_prompt(self, text: str) -> None:
        self.prompt = text

    def current_prompt(self) -> str:
        return self.prompt

    def offer_follow_up(self) -> None:
        self.calls.append(("follow_up", None))

    def show_draft_lane(self, shown: bool, note: str = "") -> None:
        self.calls.append(("draft_lane", shown))
        self.draft_note = note  # what the lane says in place of its text

    def clear_lanes(self) -> None:
        self.events = {}

    def start_turn(self, index: int, prompt: str) -> None:
        self.calls.append(("turn", (index, prompt)))

    def add_event(self, lane: str, event: Event, drafted_text: tuple[str, ...]) -> None:
        self.events.setdefault(lane, []).append(event)
        if isinstance(event, RoundEvent):
            assert len(drafted_text) == event.nodes  # the tape gets each drafted token's text

    def redraw(self, full: bool) -> None:
        self.calls.append(("redraw", full))

    def when_drawn(self, then: Callable[[], None]) -> None:
        then()

    def said(self, kind: str) -> list[Any]:
        return [value for name, value in self.calls if name == kind]


class Outbox:
    """The controller's outbox as the app's would be: each notice queued for the UI thread (the
    test's), where it goes to the controller or the frame logic."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness

    def models_loaded(self, *loaded: Any) -> None:
        self.h.posted.put(lambda: self.h.playground.loaded(*loaded))

    def run_ended(self, run_id: int, error: BaseException | None) -> None:
        self.h.posted.put(lambda: self.h.playground.ended(run_id, error))

    def lane_events_arrived(self) -> None:
        self.h.posted.put(lambda: self.h.drain and self.h.playground.drain())

    def models_waiting(self) -> None:
        self.h.posted.put(lambda: self.h.on_waiting())

    def token_texts_arrived(self) -> None:
        pass

    def costs_measured(self, costs: Any, error: BaseException | None) -> None:
        self.h.posted.put(lambda: self.h.playground.costs_measured(costs, error))


class Harness:
    """The controller on the scripted backend (or the stream `config` names), with the UI thread's
    message queue pumped by the test as the app would: each message to its handler."""

    def __init__(
        self,
        sessions: Path,
        clock: Callable[[], float] | None = None,
        wall_ms: float = 1.0,
        config: RunConfig | None = None,
        **request: Any,
    ) -> None:
        """`clock` times the lanes (the backend's simulated one unless given); each target
        forward really takes `wall_ms`, so a run lasts long enough to be changed while it goes.
        With `config`, the stream it names instead (a vLLM server's)."""
        self.posted: queue.Queue[Callable[[], None]] = queue.Queue()
        self.backend = scripted_backend(Cost(wall_ms=wall_ms), drafters=("near", "far"))
        if config is not None:
            host = ModelHost(config)
        else:
            config = scripted_config(self.backend, sessions, **request)
            host = ModelHost(config, clock or self.backend.clock, scripted_stream(self.backend))
        self.screen = Screen(CODE_PROMPT)
        self.playground = PlaygroundController(config, host, Outbox(self))
        self.playground.attach(self.screen)
        self.on_waiting: Callable[[], None] = self._draw_while_waiting
        self.drain = True

    def _draw_while_waiting(self) -> None:
        self.playground.drain()
        self.playground.release_models()

    def pump(self, drain: bool = True) -> None:
        self.drain = drain
        while not self.posted.empty():
            self.posted.get()()

    def until(self, condition: Callable[[], bool], what: str, timeout_s: float = 30.0, drain: bool = True) -> None:
        """Pump the UI thread's messages until `condition`; `drain=False` leaves the inbox as the
        model thread filled it (no frame takes it)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.pump(drain)
            time.sleep(0.005)


@pytest.fixture
def harness(tmp_path: Path) -> Any:
    h = Harness(tmp_path, raw=True, max_tokens=4000, ignore_eos=True)
    yield h
    h.playground.close()


def test_load_run_route_live_changes_and_save(harness: Harness, tmp_path: Path) -> None:
    playground, screen = harness.playground, harness.screen
    playground.run()  # kept while loading, then taken back
    assert playground.pending.kept and "the run starts once they are loaded" in playground.status
    playground.run()
    assert not playground.pending.kept and "run cancelled" in playground.status
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    assert screen.said("loaded")[-1][0] == ("near", "far")
    playground.change("route", "near")  # before a run: only the next run's settings
    playground.run()
    harness.until(lambda: len(screen.events.get("speculative", [])) > 5, "rounds")
    playground.change("k", 2)
    playground.change("temperature", 0.5)
    playground.change("seed", 9)  # not live: the next run's
    harness.until(lambda: any(isinstance(e, ControlEvent) for e in screen.events.get("target", [])), "the change")
    playground.stop()
    harness.until(lambda: playground.state == RunState.READY, "the run to stop")

    speculative = [e for e in playground.events["speculative"] if isinstance(e, ControlEvent)]
    target = [e for e in playground.events["target"] if isinstance(e, ControlEvent)]
    assert {name for e in speculative for name, _, _ in e.changes} == {"k", "temperature"}
    assert {name for e in target for name, _, _ in e.changes} == {"temperature"}  # only sampling reaches it
    assert every(isinstance(playground.events[lane][-1], DoneEvent) for lane in ("speculative", "target"))
    assert playground.seed == 9 and playground.settings.k == 2
    assert playground.last_session is not None
    session = load_session(playground.last_session)
    assert session.complete and list(session.header["lanes"]) == ["speculative", "target"]
    assert session.header["request"]["source"] == "tui" and session.header["request"]["seed"] == 0
    assert session.main.settings.route == "near" and session.capabilities == SCRIPTED


def test_read_only_capabilities_refuse_live_changes_and_bad_values_are_one_line(harness: Harness) -> None:
    playground, screen = harness.playground, harness.screen
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    playground.change("route", "nowhere")
    assert "--route 'nowhere' is not a drafter" in screen.said("notify")[-1][0]
    playground.capabilities = replace(playground.capabilities, live_controls=False, modes=("speculative",))
    playground.run()
    harness.until(lambda: len(playground.events["speculative"]) > 3, "rounds")
    assert playground.lanes == ("speculative",)  # no target-only lane where the stream runs none
    playground.change("k", 7)
    assert "from the next run" in screen.said("notify")[-1][0]
    playground.stop()
    harness.until(lambda: playground.state == RunState.READY, "the run to stop")
    assert not any(isinstance(e, ControlEvent) for e in playground.events["speculative"])


@pytest.mark.parametrize(("setting", "value"), [("k", "x"), ("width", None), ("rule", ["typical"])])
def test_a_control_value_no_check_expects_is_a_notification_not_a_crash(
    harness: Harness, setting: str, value: Any
) -> None:
    """Whatever a control sends (a control of its own module may send text where a number
    belongs), the playground says so in one line, keeps its settings and the run goes on."""
    playground, screen = harness.playground, harness.screen
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    playground.run()
    harness.until(lambda: len(screen.events.get("speculative", [])) > 3, "rounds")
    kept = playground.settings
    playground.change(setting, value)
    text, error = screen.said("notify")[-1]
    assert error and text.startswith(f"{setting} not changed: ") and "\n" not in text, text
    assert playground.settings == kept
    seen = len(screen.events["speculative"])
    harness.until(lambda: len(screen.events["speculative"]) > seen + 2, "rounds after the refusal")
    playground.stop()
    harness.until(lambda: playground.state == RunState.READY, "the run to stop")


@pytest.mark.parametrize("order", [("width", "rule"), ("rule", "width")])
def test_a_tree_under_typical_acceptance_is_refused_whichever_comes_second(
    harness: Harness, order: tuple[str, str]
) -> None:
    """Siblings are judged losslessly only: width 2 and the typical rule, changed live in either
    order, take the first and refuse the second in one line, and the run goes on."""
    playground, screen = harness.playground, harness.screen
    picks = {"width": 2, "rule": "typical"}
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    playground.run()
    harness.until(lambda: len(screen.events.get("speculative", [])) > 3, "rounds")
    first, second = order
    playground.change(first, picks[first])
    assert getattr(playground.settings, first) == picks[first]
    kept = playground.settings
    playground.change(second, picks[second])
    text, error = screen.said("notify")[-1]
    assert error and "judged losslessly only" in text and "\n" not in text, text
    assert playground.settings == kept
    seen = len(screen.events["speculative"])
    harness.until(lambda: len(screen.events["speculative"]) > seen + 2, "rounds after the refusal")
    playground.stop()
    harness.until(lambda: playground.state == RunState.READY, "the run to stop")


def test_a_saved_session_opens_read_only_with_its_settings(harness: Harness, tmp_path: Path) -> None:
    first = Harness(tmp_path, raw=True, max_tokens=12, settings=SpecSettings(k=3, route="far"), seed=4)
    first.playground.load()
    first.until(lambda: first.playground.state == RunState.READY, "the models to load")
    first.playground.run()
    first.until(lambda: first.playground.last_session is not None, "the run to end")
    saved = first.playground.last_session
    first.playground.close()
    assert saved is not None

    playground, screen = harness.playground, harness.screen
    open_saved(playground, saved)  # while the models still load
    assert playground.opened is not None and screen.prompt == CODE_PROMPT
    assert screen.events["speculative"] == load_session(saved).main.events
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    settings, seed = screen.said("settings")[-1]
    assert settings.k == 3 and settings.route == "far" and seed == 4
    assert playground.rerun_session() and playground.settings == settings


def test_frames_are_drawn_while_the_models_wait_between_events(tmp_path: Path) -> None:
    """A frame asked for is drawn at the models' next event boundary, they make nothing while it
    is drawn, and the lanes' clocks (real ones here) leave that time out."""
    harness = Harness(tmp_path, clock=time.perf_counter, raw=True, max_tokens=4000, ignore_eos=True)
    try:
        frames_between_turns(harness)
    finally:
        harness.playground.close()


def frames_between_turns(harness: Harness) -> None:
    playground = harness.playground
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    playground.run()
    harness.until(lambda: len(playground.events["speculative"]) > 3, "rounds")
    held: dict[str, Any] = {}

    def draw() -> None:
        held["made"] = list(playground.board.inbox)
        time.sleep(0.5)  # a slow frame
        held["made while drawn"] = len(playground.board.inbox) - len(held["made"])
        playground.release_models()

    harness.on_waiting = draw
    playground.drain()
    harness.until(lambda: any(i.lane == "speculative" for i in list(playground.board.inbox)), "a round", drain=False)
    assert playground.draw_between_turns()
    harness.until(lambda: "made while drawn" in held, "the frame", drain=False)
    assert held["made while drawn"] == 0
    made = len(held["made"])

    def later_rounds() -> list[LaneItem]:
        return [i for i in list(playground.board.inbox)[made:] if i.lane == "speculative"]

    harness.until(lambda: len(later_rounds()) >= 2, "more rounds", drain=False)
    before = [i for i in held["made"] if i.lane == "speculative"]
    after = later_rounds()
    assert after[0].busy_s - before[-1].busy_s < 0.4  # the lane's clock did not run through the frame
    playground.stop()
    harness.until(lambda: playground.state == RunState.READY, "the run to stop")


def test_quitting_mid_run_saves_what_no_frame_took_yet(harness: Harness, tmp_path: Path) -> None:
    """Events wait in the inbox for the next frame, up to a second on a busy machine: quitting then
    writes them to the session (incomplete), rather than leaving none."""
    playground = harness.playground
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    playground.run()
    harness.until(lambda: sum(i.lane == "speculative" for i in list(playground.board.inbox)) > 3, "rounds", drain=False)
    assert not playground.events["speculative"]  # no frame has taken anything
    playground.close()
    (path,) = list_session_files(tmp_path)
    session = load_session(path)
    assert not session.complete
    assert len(session.lanes["speculative"].events) > 3


def test_a_disk_full_before_the_header_leaves_no_empty_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from specplay.store import writer
    from specplay.store.format import SessionError

    def full(self: writer.SessionWriter, record: dict[str, Any]) -> None:
        self._file.write = lambda _: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))  # type: ignore[method-assign]
        original(self, record)

    original = writer.SessionWriter._write
    monkeypatch.setattr(writer.SessionWriter, "_write", full)
    with pytest.raises(SessionError, match="No space left on device"):
        writer.SessionWriter(
            tmp_path,
            prompt="p",
            prompt_token_ids=[1],
            lanes=["speculative"],
            backend={},
            request={},
            capabilities=Capabilities(),
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", ["scripted", "vllm"])
def test_a_full_disk_mid_run_stops_saving_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, backend: str
) -> None:
    """The other lane's start must not open a second session once the first could not be written
    (vLLM's lanes run one after the other: a second start comes later there)."""
    import errno

    from specplay.store import writer

    original = writer.SessionWriter._write
    counts = {"records": 0}

    def filling(self: writer.SessionWriter, record: dict[str, Any], flush: bool = True) -> None:
        counts["records"] += 1
        if counts["records"] == 2:  # the disk is full for a moment: the first lane's first event is lost
            self._file.write = lambda _: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))  # type: ignore[method-assign]
        original(self, record, flush)

    monkeypatch.setattr(writer.SessionWriter, "_write", filling)
    run_request = {"raw": True, "max_tokens": 24, "ignore_eos": True}
    config = None
    if backend == "vllm":
        target, near = request.getfixturevalue("servers")  # fake vLLM servers of the tiny models
        config = server_config(target.url, {"near": near.url}, tmp_path, **run_request)
    harness = Harness(tmp_path, config=config, **run_request)
    playground, screen = harness.playground, harness.screen
    try:
        playground.load()
        harness.until(lambda: playground.state == RunState.READY, "the models to load")
        playground.run()
        harness.until(lambda: playground.state == RunState.READY and bool(screen.events), "the run to finish")
    finally:
        playground.close()
    statuses = [text for text, _ in screen.said("status")]
    assert any(s.startswith("not saving: ") and "No space left on device" in s for s in statuses), statuses
    assert statuses[-1].startswith("finished (") and "NOT saved: " in statuses[-1] and "No space left" in statuses[-1]
    assert playground.last_session is None
    assert every(isinstance(playground.events[lane][-1], DoneEvent) for lane in ("speculative", "target"))
    (path,) = tmp_path.glob("*.jsonl")
    assert not load_session(path).complete  # what was written before the disk filled is kept


@contextlib.contextmanager
def running(tmp_path: Path, max_tokens: int) -> Iterator[Harness]:
    """A harness whose models have loaded and whose run has started; closed after."""
    harness = Harness(tmp_path, wall_ms=2.0, raw=True, max_tokens=max_tokens, ignore_eos=True)
    try:
        harness.playground.load()
        harness.until(lambda: harness.playground.state == RunState.READY, "the models to load")
        harness.playground.run()
        yield harness
    finally:
        harness.playground.close()


def test_a_change_that_can_no_longer_apply_says_so(tmp_path: Path) -> None:
    """The speculative lane ends first (fewer target passes); a k change then reaches no lane that
    still generates, and the user is told rather than shown a slider that did nothing."""
    with running(tmp_path, max_tokens=120) as harness:
        playground, screen = harness.playground, harness.screen
        speculative_done = lambda: playground.board.ended("speculative")  # noqa: E731
        harness.until(speculative_done, "the speculative lane to end")
        assert playground.state == RunState.RUNNING  # the target-only lane still generates
        playground.change("k", 2)
        assert screen.said("notify")[-1] == (
            "the lanes this change goes to have ended: it applies from the next run",
            False,
        )
        playground.change("temperature", 0.5)  # the target-only lane still takes sampling changes
        assert screen.said("notify")[-1][0].startswith("the lanes this change goes to have ended")
        assert len(screen.said("notify")) == 1


def test_route_none_runs_the_speculative_lane_as_target_steps_and_says_so(harness: Harness) -> None:
    """No speculation from the route control: the speculative lane's rounds draft nothing and its
    tokens are the target's; the status line says so; a draft-only lane has no drafter to run."""
    playground, screen = harness.playground, harness.screen
    playground.load()
    harness.until(lambda: playground.state == RunState.READY, "the models to load")
    playground.change("route", "none")
    playground.change("draft_lane", True)
    playground.run()
    assert ("no draft-only lane: the route is none, which drafts nothing", False) in screen.said("notify")
    assert "route none: no speculation" in screen.said("status")[-1][0]
    harness.until(lambda: len(screen.events.get("speculative", [])) > 5, "rounds")
    playground.stop()
    harness.until(lambda: playground.state == RunState.READY, "the run to stop")
    rounds = [e for e in playground.events["speculative"] if isinstance(e, RoundEvent)]
    assert rounds and all(r.drafter == "none" and r.nodes == 0 for r in rounds)
    assert {t.source for r in rounds for t in r.tokens} == {"target"}
    assert playground.lanes == ("speculative", "target")


def test_the_status_line_follows_a_route_changed_mid_run(tmp_path: Path) -> None:
    """It said where auto sent the prompt; after the route control moves it says the new route,
    not the old choice."""
    with running(tmp_path, max_tokens=120) as harness:
        playground, screen = harness.playground, harness.screen
        assert screen.said("status")[-1][0].startswith("generating") and "auto:" in screen.said("status")[-1][0]
        harness.until(lambda: len(screen.events.get("speculative", [])) > 3, "rounds")
        playground.change("route", "far")
        now = screen.said("status")[-1][0]
        assert "route far (pinned)" in now and "auto:" not in now
        # The draft-only lane turned on mid-run says in the lane why it is empty.
        playground.change("draft_lane", True)
        assert screen.draft_note.startswith("the draft-only lane runs from the next run")
        harness.until(lambda: playground.state == RunState.READY, "the run to end", timeout_s=60)
        assert "route far (pinned)" in playground.status and playground.status.startswith("finished")


def test_the_first_token_time_shown_while_running_is_the_one_the_run_ends_with(tmp_path: Path) -> None:
    """One definition: the time to the first token, shown as soon as it is known, does not jump
    when the run ends and the engine's own number replaces the lane's."""
    with running(tmp_path, max_tokens=40) as harness:
        playground = harness.playground
        harness.until(lambda: playground.tallies["speculative"].tokens > 0, "the first tokens")
        live = playground.tallies["speculative"].time_to_first_token_s
        harness.until(lambda: playground.state == RunState.READY, "the run to end", timeout_s=60)
        final = playground.tallies["speculative"].time_to_first_token_s
        assert live is not None and final is not None and live == pytest.approx(final, rel=0.02, abs=0.002)


def _turn_prompt_ids(playground: PlaygroundController) -> dict[str, list[int]]:
    """Each lane's prompt in the turn just run: its conversation so far, as the engine took it."""
    starts = {lane: playground.events[lane][0] for lane in playground.lanes}
    assert every(isinstance(start, StartEvent) for start in starts.values())
    return {lane: list(start.prompt_token_ids) for lane, start in starts.items()}  # type: ignore[union-attr]


def _answers(playground: PlaygroundController) -> dict[str, str]:
    ends = {lane: playground.events[lane][-1] for lane in playground.lanes}
    assert every(isinstance(end, DoneEvent) for end in ends.values())
    return {lane: end.text for lane, end in ends.items()}  # type: ignore[union-attr]


def test_turn_bookkeeping_follow_ups_a_rerun_a_new_conversation_and_a_failed_turn(tmp_path: Path) -> None:
    """Without a terminal: a follow-up is each lane's next turn after its own earlier answers and
    goes on in the same session; the first prompt unchanged runs again from the start; a new
    conversation forgets the turns; a turn that fails (the conversation outgrew the target's
    context) ends the conversation, and the next run starts over."""
    harness = Harness(tmp_path, raw=True, max_tokens=24, ignore_eos=True, settings=SpecSettings(route="near"))
    playground, screen, backend = harness.playground, harness.screen, harness.backend

    def run(prompt: str, until: str = "finished") -> None:
        screen.prompt = prompt
        playground.run()
        harness.until(lambda: playground.state == RunState.READY and playground.status.startswith(until), "the run")

    try:
        playground.load()
        harness.until(lambda: playground.state == RunState.READY, "the models to load")
        run(CODE_PROMPT)
        first = _answers(playground)
        session = playground.last_session
        assert session is not None and len(playground.conversation) == 1 and not screen.said("turn")
        assert len(screen.said("follow_up")) == 1  # the prompt, selected: what is typed replaces it

        run("shorter")
        assert screen.said("turn") == [(1, "shorter")] and playground.status.startswith("finished (length) turn 2 ")
        assert _turn_prompt_ids(playground) == {
            lane: backend.encode("shorter", True, [Exchange(CODE_PROMPT, first[lane])]) for lane in first
        }
        second = _answers(playground)
        run("shorter")  # after turn 2 the same text again is a follow-up too ("continue", twice)
        assert screen.said("turn")[-1] == (2, "shorter")
        earlier = {lane: [Exchange(CODE_PROMPT, first[lane]), Exchange("shorter", second[lane])] for lane in first}
        assert _turn_prompt_ids(playground) == {lane: backend.encode("shorter", True, earlier[lane]) for lane in first}
        assert playground.last_session == session and list_session_files(tmp_path) == [session]
        saved = load_session(session)
        assert saved.complete and [t.prompt for t in saved.turns] == [CODE_PROMPT, "shorter", "shorter"]
        assert {lane: saved.turns[1].lanes[lane].done.text for lane in first} == second  # type: ignore[union-attr]
        assert [len(playground.turn_tallies(lane)) for lane in first] == [3, 3]

        playground.new_conversation()
        assert len(playground.conversation) == 0 and playground.turn_tallies("speculative")[-1].tokens == 0
        run("shorter")
        assert _turn_prompt_ids(playground) == {lane: backend.encode("shorter", True) for lane in first}
        assert playground.last_session != session and len(list_session_files(tmp_path)) == 2
        run("shorter")  # the first prompt unchanged: run again, as a conversation of its own
        assert len(playground.conversation) == 1 and len(list_session_files(tmp_path)) == 3
        assert _turn_prompt_ids(playground) == {lane: backend.encode("shorter", True) for lane in first}

        # A follow-up the target cannot attend over fails, and ends the conversation.
        backend.context_length = len(backend.encode("shorter", True)) + 24 + 3
        run("and again", until="run failed")
        assert "the target's context is" in playground.status
        assert playground.status.endswith("; the next run starts a new conversation")
        assert len(playground.conversation) == 0
        backend.context_length = None
        run("and again")
        assert _turn_prompt_ids(playground) == {lane: backend.encode("and again", True) for lane in first}
    finally:
        playground.close()


def test_a_change_in_a_later_turn_applies_there_and_the_draft_lane_waits_for_the_next_conversation(
    tmp_path: Path,
) -> None:
    """Live changes reach the lanes of whichever turn runs; the draft-only lane, switched on
    after a conversation began, runs from the next conversation (each lane's conversation begins
    with its first turn), and a follow-up the draft-only lane cannot answer is refused in one line."""
    harness = Harness(tmp_path, raw=True, max_tokens=48, ignore_eos=True)
    playground, screen = harness.playground, harness.screen
    try:
        playground.load()
        harness.until(lambda: playground.state == RunState.READY, "the models to load")
        playground.change("route", "near")
        playground.run()
        harness.until(lambda: playground.state == RunState.READY, "turn 1")
        playground.change("draft_lane", True)
        assert screen.said("notify")[-1][0] == "the draft-only lane changes from the next conversation (ctrl+n)"
        screen.prompt = "go on"
        hold = RoundHold(playground.board)
        playground.run()
        harness.until(hold.reached.is_set, "turn 2's first round")
        playground.change("k", 2)
        hold.release()
        harness.until(lambda: playground.state == RunState.READY, "turn 2")

        def rounds() -> list[RoundEvent]:
            return [e for e in playground.events["speculative"] if isinstance(e, RoundEvent)]

        assert playground.lanes == ("speculative", "target")  # no draft-only lane in this conversation
        assert rounds()[0].nodes == 4 and rounds()[-2].nodes == 2
        turn_2 = load_session(playground.last_session).turns[1]  # type: ignore[arg-type]
        assert any(isinstance(e, ControlEvent) for e in turn_2.lanes["speculative"].events)

        playground.new_conversation()
        playground.run()
        harness.until(lambda: playground.state == RunState.READY, "a conversation with the draft-only lane")
        assert playground.lanes == ("speculative", "target", "draft")
        playground.change("route", "none")
        screen.prompt = "more"
        statuses = len(screen.said("status"))
        playground.run()
        assert playground.state == RunState.READY and len(playground.conversation) == 1
        (refused,) = screen.said("status")[statuses:]
        assert refused[1] and refused[0].startswith("the draft-only lane cannot answer this turn: ")
        assert refused[0].endswith("route to a drafter, or ctrl+n starts over")
    finally:
        playground.close()


def test_measuring_round_costs_between_turns_keeps_the_conversations_caches(tmp_path: Path) -> None:
    """The measurement runs generations of its own; the follow-up still goes on from each lane's
    generation, its caches as its first turn left them."""
    harness = Harness(tmp_path, raw=True, max_tokens=16, ignore_eos=True, settings=SpecSettings(route="near"))
    playground, screen, backend = harness.playground, harness.screen, harness.backend
    try:
        playground.load()
        harness.until(lambda: playground.state == RunState.READY, "the models to load")
        playground.run()
        harness.until(lambda: playground.status.startswith("finished"), "turn 1")
        turn_1 = list(backend.generations)
        playground.measure_costs()
        harness.until(lambda: playground.costs is not None, "the round costs", timeout_s=60)
        measured = len(backend.generations)
        screen.prompt = "go on"
        playground.run()
        harness.until(lambda: playground.status.startswith("finished (length) turn 2"), "turn 2")
        assert measured > len(turn_1)  # the measurement opened generations of its own
        assert {id(g) for g in backend.generations[measured:]} == {id(g) for g in turn_1}
    finally:
        playground.close()


def test_round_costs_are_measured_at_the_length_the_next_turn_would_have(tmp_path: Path) -> None:
    """In a conversation a follow-up's verify pass runs after the speculative lane's earlier
    exchanges: the costs are measured there, and the status line says at how many tokens."""
    harness = Harness(tmp_path, raw=True, max_tokens=16, ignore_eos=True, settings=SpecSettings(route="near"))
    playground, screen, backend = harness.playground, harness.screen, harness.backend

    def measured(prompt: str) -> list[int]:
        """Measure with `prompt` on screen: the tokens the measurement's first generation began with
        (as many as the costs say they were measured at)."""
        screen.prompt = prompt
        opened = len(backend.generations)
        playground.measure_costs()
        harness.until(lambda: playground.status.startswith("round costs measured"), "the round costs", timeout_s=60)
        assert playground.costs is not None and playground.costs.context_tokens is not None
        tokens = playground.costs.context_tokens
        assert f"round costs measured at {tokens} tokens (verify in target steps: " in playground.status
        return backend.generations[opened].tokens[:tokens]

    try:
        playground.load()
        harness.until(lambda: playground.state == RunState.READY, "the models to load")
        assert measured(CODE_PROMPT) == backend.encode(CODE_PROMPT, True)  # no conversation yet: the prompt
        playground.run()
        harness.until(lambda: playground.status.startswith("finished"), "turn 1")
        (turn,) = playground.conversation.turns
        follow_up = backend.encode("go on", True, [Exchange(CODE_PROMPT, turn.answers["speculative"])])
        assert measured("go on") == follow_up and len(follow_up) > 2 * len(backend.encode("go on", True))
        assert "after the conversation's earlier turn" in screen.said("status")[-2][0]  # while it measured
        # the first turn's prompt again starts the conversation over: measured at its own length
        assert measured(CODE_PROMPT) == backend.encode(CODE_PROMPT, True)
    finally:
        playground.close()
