"""The playground: a prompt, lanes side by side (target-only, speculative, optionally draft-only),
live controls, token drill-down, plots; and saved sessions reopened read-only and re-run.

All model work runs on the ModelHost's thread; its events come back as messages, so the UI never
waits on a model and keys are handled while lanes generate.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Header, Select, Static, TextArea

from specplay.engine.controls import LiveControls
from specplay.engine.events import Event, RoundEvent, StartEvent
from specplay.engine.settings import AUTO_ROUTE, SamplingParams, SpecSettings
from specplay.errors import ConfigError, SpecplayError
from specplay.runner.host import DRAFT_LANE, LANES, Loader, ModelHost, RunSpec, error_line
from specplay.store import Session, SessionWriter, list_session_files, load_session, sessions_dir
from specplay.ui.library import library_prompts
from specplay.ui.messages import LaneItem, ModelsFailed, ModelsLoaded, RunEnded
from specplay.ui.opened import event_seconds, session_events, settings_from
from specplay.ui.stats import LaneTally, compare
from specplay.ui.theming import DEFAULT_THEME, load_themes
from specplay.ui.tokens import legend
from specplay.ui.widgets.controls_panel import ControlsPanel
from specplay.ui.widgets.inspector import Inspector
from specplay.ui.widgets.lane_view import LaneView
from specplay.ui.widgets.plots import Plots
from specplay.ui.widgets.stats_view import NATIVE_NOTE, NO_BASELINE, native_stats, speculative_stats, target_stats
from specplay.ui.widgets.tape import DraftTape

State = Literal["loading", "failed", "ready", "running", "stopping"]
TICK_HZ = 10
UI_CPU_BUDGET = 0.02
"""While lanes generate, the share of a core the UI thread may take (events, frames): a frame
costs tens of ms of Python, so on a slow machine the screen updates less often, never the lanes
slower (benchmarks/bench_tui.py measures the lanes under the UI against headless)."""
MAX_FRAME_INTERVAL_S = 1.0
"""...but the screen still moves at least this often (other UI work, like typing, can use the budget)."""
ALL_LANES = (*LANES, DRAFT_LANE)
RECENT_SESSIONS = 10
"""Sessions the command palette offers to open."""
_SAMPLING_FIELDS = frozenset(SamplingParams.__dataclass_fields__)


@dataclass(frozen=True)
class PlaygroundOptions:
    settings: SpecSettings = field(default_factory=SpecSettings)
    prompt: str = ""
    autorun: bool = False
    max_tokens: int = 256
    seed: int = 0
    raw: bool = False
    ignore_eos: bool = False
    sessions_dir: Path | None = None
    """None: $SPECPLAY_SESSIONS_DIR, else ./sessions."""
    route_map: dict[str, str] = field(default_factory=dict)
    theme: str = DEFAULT_THEME
    draft_lane: bool = False
    """Start with the draft-only lane shown (a switch in the controls turns it on and off)."""
    open_session: Path | None = None
    """A saved session to show read-only at start; ctrl+r or the palette re-runs it."""


def create_app(
    loader: Loader,
    options: PlaygroundOptions | None = None,
    on_exit: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PlaygroundApp:
    """The playground; `loader` runs on the app's model thread (MLX state belongs to its thread),
    `on_exit` as that thread ends, `clock` times the lanes (a fake one makes screens repeatable)."""
    options = options or PlaygroundOptions()
    return PlaygroundApp(ModelHost(loader, on_exit, options.route_map, clock), options)


class PlaygroundApp(App[None]):
    TITLE = "specplay"
    SUB_TITLE = "speculative decoding, side by side"
    CSS = """
    #body { height: 1fr; }
    #main { width: 1fr; }
    #prompt-row { height: 6; }
    #prompt { height: 6; width: 1fr; border: round $panel-lighten-2; }
    #library { width: 30; }
    #status { height: 1; padding: 0 1; color: $text-muted; }
    #status.error { color: $error; }
    #lanes { height: 1fr; }
    LaneView { width: 1fr; }
    #bottom { height: 14; }
    #tape { height: 100%; width: 1fr; }
    #side { width: 36; }
    #controls { width: 100%; height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("escape", "stop", "Stop"),
        Binding("f2", "toggle_draft_lane", "Draft lane", priority=True),
        Binding("f3", "inspect_last", "Inspect", priority=True),
        Binding("f4", "pick_prompt", "Prompts", priority=True),
        Binding("ctrl+t", "next_theme", "Theme", priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(self, host: ModelHost, options: PlaygroundOptions) -> None:
        super().__init__()
        self.host = host
        self.options = options
        self.settings = options.settings
        """What the controls say now: the next run starts with it."""
        self.seed = options.seed
        self.state: State = "loading"
        self.status = ""
        self.drafters: tuple[str, ...] = ()
        self.identity: dict[str, Any] = {}
        self.run_id = 0
        self.controls: dict[str, LiveControls] = {}
        self.draft_lane = options.draft_lane
        self.lanes: tuple[str, ...] = LANES
        """The lanes of the current (or last) run, in session order."""
        self.events: dict[str, list[Event]] = {lane: [] for lane in ALL_LANES}
        """Every event of the current (or last) run, per lane: what the session records."""
        self.tallies: dict[str, LaneTally] = {lane: LaneTally() for lane in ALL_LANES}
        self.opened: Session | None = None
        """The session on show read-only, until the next run."""
        self.library = library_prompts()
        self.last_session: Path | None = None
        self._writer: SessionWriter | None = None
        self._run_prompt = ""
        self._theme_names: list[str] = []
        self._inbox: deque[LaneItem] = deque()
        """Filled by the model thread, drained by the UI in batches (deque appends are thread-safe)."""
        self._dirty = False
        self._frame_wall = self._frame_cpu = 0.0
        """When the UI last drew during a run: wall time, and the UI thread's CPU time."""

    # --- layout and start ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with Vertical(id="main"):
                with Horizontal(id="prompt-row"):
                    prompt = TextArea(self.options.prompt, id="prompt", soft_wrap=True)
                    prompt.border_title = "prompt  (ctrl+r runs, escape stops)"
                    yield prompt
                    options = [(p.label, i) for i, p in enumerate(self.library)]
                    yield Select(options, prompt="prompt library", id="library")
                yield Static("", id="status")
                with Horizontal(id="lanes"):
                    yield LaneView("target", "target-only", id="target")
                    yield LaneView("speculative", "speculative", legend=legend(), selectable=True, id="speculative")
                    draft = LaneView(DRAFT_LANE, "draft-only", id=DRAFT_LANE)
                    draft.display = self.draft_lane
                    yield draft
                with Horizontal(id="bottom"):
                    yield DraftTape(id="tape")
                    yield Inspector(id="inspector")
            with Vertical(id="side"):
                yield ControlsPanel(self.settings, self.seed, id="controls")
                yield Plots(id="plots")
        yield Footer()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Themes without token colours (Textual's own) fall back to the default theme's.
        defaults = next((t.variables for t in load_themes() if t.name == DEFAULT_THEME), {})
        return {**super().get_theme_variable_defaults(), **defaults}

    def on_mount(self) -> None:
        for theme in load_themes():
            self.register_theme(theme)
            self._theme_names.append(theme.name)
        self.theme = self.options.theme if self.options.theme in self.available_themes else DEFAULT_THEME
        self.query_one("#lanes").loading = True
        self._set_status("loading models…")
        self.query_one("#prompt", TextArea).focus()
        self.set_interval(1 / TICK_HZ, self._tick)
        if self.draft_lane:
            self.query_one("#draft-lane").value = True  # type: ignore[attr-defined]
        if self.options.open_session is not None:
            self.open_session(self.options.open_session)
        self.host.load(self._loaded)

    def _loaded(self, drafters: tuple[str, ...] | None, identity: dict[str, Any], error: BaseException | None) -> None:
        """On the model thread."""
        if error is not None:
            self.post_message(ModelsFailed(error_line(error)))
        else:
            self.post_message(ModelsLoaded(drafters or (), identity))

    @property
    def native(self) -> bool:
        """vLLM's native mode: the server speculates with its own drafter, k and rule."""
        return self.identity.get("mode") == "native"

    def on_models_loaded(self, message: ModelsLoaded) -> None:
        self.drafters, self.identity = message.drafters, message.identity
        self.query_one("#lanes").loading = False
        self.query_one(ControlsPanel).set_drafters(self.drafters)
        if self.native:
            self.query_one(ControlsPanel).fix_speculation(NATIVE_NOTE, routes=len(self.drafters) > 1)
            if "baseline" not in self.identity:
                self.query_one("#target", LaneView).set_stats(Content(NO_BASELINE))
        self.state = "ready"
        if self.opened is None:
            self._set_status(f"ready: target and drafters {', '.join(self.drafters) or '(none)'}; ctrl+r runs")
        else:
            self._show_opened_settings(self.opened)
        if self.options.autorun:
            self.action_run()

    def on_models_failed(self, message: ModelsFailed) -> None:
        self.query_one("#lanes").loading = False
        self.state = "failed"
        self._set_status(f"models failed to load: {message.error} (ctrl+q quits)", error=True)

    # --- actions -----------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Run", "Generate in every lane (ctrl+r)", self.action_run)
        yield SystemCommand("Stop", "Stop the lanes at the next round (escape)", self.action_stop)
        yield SystemCommand("Next theme", "Cycle the specplay themes (ctrl+t)", self.action_next_theme)
        yield SystemCommand(
            "Draft-only lane", "Show or hide the drafter-alone lane (f2)", self.action_toggle_draft_lane
        )
        yield SystemCommand(
            "Inspect a token", "Drill into the speculative lane's last token (f3)", self.action_inspect_last
        )
        yield SystemCommand("Prompt library", "Pick a prompt from the shipped library (f4)", self.action_pick_prompt)
        for i, prompt in enumerate(self.library):
            yield SystemCommand(
                f"Prompt: {prompt.label}", "Put this library prompt in the editor", partial(self.use_prompt, i)
            )
        if self.opened is not None:
            yield SystemCommand(
                "Re-run the opened session",
                "Its prompt, seed and settings, on the loaded models",
                self.action_rerun_session,
            )
        directory = sessions_dir(self.options.sessions_dir)
        for path in reversed(list_session_files(directory)[-RECENT_SESSIONS:]):
            yield SystemCommand(
                f"Open session {path.stem}", "Show a saved session read-only", partial(self.open_session, path)
            )

    def action_run(self) -> None:
        if self.state != "ready":
            self.notify(f"cannot run while {self.state}", severity="warning")
            return
        prompt = self.query_one("#prompt", TextArea).text
        if not prompt.strip():
            self._set_status("type a prompt first", error=True)
            return
        self.run_id += 1
        self.opened = None
        self.lanes = (*LANES, DRAFT_LANE) if self.draft_lane else LANES
        if self.native:  # the server's speculation, and target-only only from a baseline server
            self.lanes = LANES if "baseline" in self.identity else LANES[:1]
        self.controls = {
            lane: LiveControls(self.settings, self.drafters if lane != "target" else ()) for lane in self.lanes
        }
        self._clear_lanes()
        self._writer, self._run_prompt = None, prompt
        opts = self.options
        spec = RunSpec(prompt, self.settings, self.seed, opts.max_tokens, opts.ignore_eos, opts.raw)
        run_id = self.run_id
        self.state = "running"
        self._frame_wall, self._frame_cpu = time.perf_counter(), time.thread_time()
        self._set_status(f"generating (seed {self.seed})… escape stops")
        self.host.start(
            spec,
            self.controls,
            lambda lane, event, busy_s, drafted: self._deliver(LaneItem(run_id, lane, event, busy_s, drafted)),
            lambda error: self.post_message(RunEnded(run_id, error_line(error) if error else None)),
        )

    def action_stop(self) -> None:
        if self.state != "running":
            return
        for controls in self.controls.values():
            controls.request_stop()
        self.state = "stopping"
        self._set_status("stopping at the next round…")

    def action_toggle_draft_lane(self) -> None:
        self.query_one("#draft-lane").toggle()  # type: ignore[attr-defined]

    def action_inspect_last(self) -> None:
        lane = self.query_one("#speculative", LaneView)
        lane.focus()
        if lane.picks:
            lane.select(lane.selected if lane.selected is not None else len(lane.picks) - 1)

    def action_pick_prompt(self) -> None:
        library = self.query_one("#library", Select)
        library.focus()
        library.action_show_overlay()

    def use_prompt(self, index: int) -> None:
        self.query_one("#prompt", TextArea).text = self.library[index].text

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "library" and isinstance(event.value, int):
            self.use_prompt(event.value)

    def on_lane_view_selected(self, message: LaneView.Selected) -> None:
        self.query_one(Inspector).show(message.pick, self.host.decode)

    def action_next_theme(self) -> None:
        names = self._theme_names
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme {self.theme}")

    # --- live controls -----------------------------------------------------------------------

    def on_controls_panel_changed(self, message: ControlsPanel.Changed) -> None:
        if message.setting == "seed":
            self.seed = message.value
            return
        if message.setting == "draft_lane":
            self.draft_lane = bool(message.value)
            self.query_one(f"#{DRAFT_LANE}").display = self.draft_lane
            if self.state in ("running", "stopping") and self.draft_lane != (DRAFT_LANE in self.lanes):
                self.notify("the draft-only lane changes from the next run")
            return
        try:
            new = self.settings.changed(**{message.setting: message.value})
            if self.drafters:
                LiveControls(new, self.drafters)  # checks the route
        except ConfigError as error:
            self.notify(error_line(error), severity="error")
            return
        if new == self.settings:
            return
        self.settings = new
        if self.state not in ("running", "stopping"):
            return
        if self.native:  # a request's settings are the server's from its first token
            self.notify("native mode: changes apply from the next run")
            return
        # The speculative lane takes every change; the target-only lane only sampling changes,
        # so the two lanes keep sampling the same distribution.
        # The draft-only lane takes the route too, so it shows the drafter now serving.
        lanes = self.lanes if message.setting in _SAMPLING_FIELDS else ("speculative",)
        lanes += (DRAFT_LANE,) if message.setting == "route" and DRAFT_LANE in self.lanes else ()
        for lane in lanes:
            self.controls[lane].update(**{message.setting: message.value})

    # --- the stream --------------------------------------------------------------------------

    def _deliver(self, item: LaneItem) -> None:
        """On the model thread: queue the item (a deque append is thread-safe). No message wakes
        the UI per event: the UI takes the queue in batches on its own ticks."""
        self._inbox.append(item)

    def _tick(self) -> None:
        """TICK_HZ times a second: take the queued events and redraw, unless, while lanes generate,
        the UI thread has used more than UI_CPU_BUDGET of a core since it last did. Every event
        taken and every frame drawn is time the model thread waits for (they share the GIL, and
        often a core), so the UI's share, not a frame rate, is what is held fixed."""
        if self.state in ("running", "stopping"):
            wall, cpu = time.perf_counter(), time.thread_time()
            since = wall - self._frame_wall
            if cpu - self._frame_cpu > UI_CPU_BUDGET * since and since < MAX_FRAME_INTERVAL_S:
                return
            self._frame_wall, self._frame_cpu = wall, cpu
        self._drain()
        self._redraw()

    def _drain(self) -> None:
        """Take every queued item of the current run."""
        taken = 0
        while self._inbox:
            item = self._inbox.popleft()
            if item.run_id == self.run_id:
                self._take(item)
                taken += 1
        self._dirty = self._dirty or taken > 0

    def _redraw(self) -> None:
        """Show what was taken since the last redraw: one update per widget however many events."""
        if not self._dirty:
            return
        self._dirty = False
        for lane in self.lanes:
            self.query_one(f"#{lane}", LaneView).flush()
        self.query_one(DraftTape).flush()
        self._show_stats()

    def _take(self, item: LaneItem, save: bool = True) -> None:
        event, lane = item.event, item.lane
        self.events[lane].append(event)
        if save and self._writer is None and isinstance(event, StartEvent):
            self._writer = self._open_writer(event)
        if self._writer is not None:
            self._writer.write_event(lane, event)
        self.tallies[lane].add(event, item.busy_s)
        self.query_one(f"#{lane}", LaneView).add(event)
        if isinstance(event, RoundEvent):
            self.query_one(DraftTape).add(event, item.drafted_text)

    def _open_writer(self, start: StartEvent) -> SessionWriter | None:
        request = {
            "mode": "speculative",
            "seed": start.seed,
            "max_tokens": self.options.max_tokens,
            "ignore_eos": self.options.ignore_eos,
            "raw": self.options.raw,
            "route_map": self.host.route_map,
            "source": "tui",
            "lanes_run_side_by_side": True,
        }
        try:
            return SessionWriter(
                sessions_dir(self.options.sessions_dir),
                self._run_prompt,
                list(start.prompt_token_ids),
                list(self.lanes),
                self.identity,
                request,
            )
        except Exception as error:  # the run goes on unsaved; say why once
            self._set_status(f"not saving: {error_line(error)}", error=True)
            return None

    def _show_stats(self) -> None:
        spec, target = self.tallies["speculative"], self.tallies["target"]
        if "target" in self.lanes:
            self.query_one("#target", LaneView).set_stats(target_stats(target))
        identity = self.opened.header.get("backend", {}) if self.opened is not None else self.identity
        if identity.get("mode") == "native":
            lane = self.query_one("#speculative", LaneView)
            lane.set_stats(native_stats(spec, compare(spec, target) if "target" in self.lanes else None))
        else:
            # Inspection through servers: wall time is HTTP round trips, so the speedup is modelled.
            remote = identity.get("backend") == "vllm"
            comparison = compare(spec, None if remote else target)
            self.query_one("#speculative", LaneView).set_stats(speculative_stats(spec, comparison, remote))
        if DRAFT_LANE in self.lanes:
            self.query_one(f"#{DRAFT_LANE}", LaneView).set_stats(target_stats(self.tallies[DRAFT_LANE]))
        self.query_one(Plots).show(spec)

    def _clear_lanes(self) -> None:
        self.events = {lane: [] for lane in ALL_LANES}
        self.tallies = {lane: LaneTally() for lane in ALL_LANES}
        for lane in ALL_LANES:
            self.query_one(f"#{lane}", LaneView).clear()
        self.query_one(DraftTape).clear()
        self.query_one(Inspector).show(None, self.host.decode)
        if self.native and "baseline" not in self.identity:
            self.query_one("#target", LaneView).set_stats(Content(NO_BASELINE))

    # --- saved sessions ----------------------------------------------------------------------

    def open_session(self, path: Path) -> None:
        """Show a saved session read-only: its prompt, lanes, tape and stats as they were."""
        if self.state in ("running", "stopping"):
            self.notify("stop the run before opening a session", severity="warning")
            return
        try:
            session = load_session(path)
        except SpecplayError as error:
            self._set_status(error_line(error), error=True)
            return
        self.run_id += 1  # anything still queued from an earlier run is dropped
        self.opened = session
        self._clear_lanes()
        self.query_one("#prompt", TextArea).text = session.prompt
        events = session_events(session)
        self.lanes = tuple(lane for lane in session.header["lanes"] if lane in ALL_LANES)
        if DRAFT_LANE in self.lanes and not self.draft_lane:
            self.action_toggle_draft_lane()
        for lane in self.lanes:
            busy_s = 0.0
            for event in events.get(lane, []):
                busy_s += event_seconds(event)
                drafted = tuple(map(self.host.decode, event.drafted)) if isinstance(event, RoundEvent) else ()
                self._take(LaneItem(self.run_id, lane, event, busy_s, drafted), save=False)
        self._redraw_now(full=True)
        if self.state == "ready":
            self._show_opened_settings(session)
        else:
            self._set_status(f"session {session.id} (read-only); loading models to re-run it…")

    def _show_opened_settings(self, session: Session) -> None:
        """Put the session's settings in the controls, so ctrl+r re-runs it."""
        settings = settings_from(session.main.settings)
        if settings.route != AUTO_ROUTE and settings.route not in self.drafters:
            settings = settings.changed(route=AUTO_ROUTE)
        self.settings = settings
        self.seed = int(session.header["request"].get("seed", self.seed))
        self.query_one(ControlsPanel).show(settings, self.seed)
        complete = "" if session.complete else " (incomplete)"
        self._set_status(f"session {session.id}{complete}, read-only; ctrl+r re-runs it with these settings")

    def action_rerun_session(self) -> None:
        session = self.opened
        if session is None:
            self.notify("no session is open", severity="warning")
            return
        self.query_one("#prompt", TextArea).text = session.prompt
        if self.state == "ready":
            self._show_opened_settings(session)
        self.call_after_refresh(self.action_run)  # after the controls' own change messages

    def on_run_ended(self, message: RunEnded) -> None:
        if message.run_id != self.run_id:
            return
        self._drain()  # events still queued belong before the end
        self._redraw_now(full=True)
        self.state = "ready"
        saved = ""
        if self._writer is not None:
            if message.error is None:
                self.last_session = self._writer.finalize()
                saved = f"; saved {self.last_session.name}"
            self._writer.close()
            self._writer = None
        if message.error is not None:
            self._set_status(f"run failed: {message.error}", error=True)
        else:
            finish = self.tallies["speculative"].finish_reason or "done"
            self._set_status(f"finished ({finish}){saved}; ctrl+r runs again")

    def _redraw_now(self, full: bool) -> None:
        self._dirty = True
        self._redraw()
        for lane in self.lanes:
            self.query_one(f"#{lane}", LaneView).flush(full=full)
        self.query_one(DraftTape).flush(full=full)

    # --- status and exit ---------------------------------------------------------------------

    def _set_status(self, text: str, error: bool = False) -> None:
        self.status = text
        status = self.query_one("#status", Static)
        status.update(Content(text))
        status.set_class(error, "error")

    def on_unmount(self) -> None:
        for controls in self.controls.values():
            controls.request_stop()
        if self._writer is not None:
            self._writer.close()  # incomplete, but every event so far is on disk
        self.host.close()
