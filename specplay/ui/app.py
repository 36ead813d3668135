"""The playground: a prompt, two lanes side by side (target-only and speculative), live controls.

All model work runs on the ModelHost's thread; its events come back as messages, so the UI never
waits on a model and keys are handled while lanes generate.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, TextArea

from specplay.engine.controls import LiveControls
from specplay.engine.events import Event, RoundEvent, StartEvent
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.errors import ConfigError
from specplay.store import SessionWriter, sessions_dir
from specplay.ui.controls_panel import ControlsPanel
from specplay.ui.host import LANES, Loader, ModelHost, RunSpec, error_line
from specplay.ui.lane_view import LaneView
from specplay.ui.messages import ItemsReady, LaneItem, ModelsFailed, ModelsLoaded, RunEnded
from specplay.ui.stats import LaneTally, compare
from specplay.ui.stats_view import speculative_stats, target_stats
from specplay.ui.tape import DraftTape
from specplay.ui.theming import DEFAULT_THEME, load_themes
from specplay.ui.tokens import legend

State = Literal["loading", "failed", "ready", "running", "stopping"]
REDRAW_HZ = 10
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
    #prompt { height: 6; border: round $panel-lighten-2; }
    #status { height: 1; padding: 0 1; color: $text-muted; }
    #status.error { color: $error; }
    #lanes { height: 1fr; }
    LaneView { width: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+t", "next_theme", "Theme"),
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
        self.events: dict[str, list[Event]] = {lane: [] for lane in LANES}
        """Every event of the current (or last) run, per lane: what the session records."""
        self.tallies: dict[str, LaneTally] = {lane: LaneTally() for lane in LANES}
        self.last_session: Path | None = None
        self._writer: SessionWriter | None = None
        self._run_prompt = ""
        self._theme_names: list[str] = []
        self._inbox: deque[LaneItem] = deque()
        """Filled by the model thread, drained by the UI in batches (deque appends are thread-safe)."""
        self._inbox_lock = threading.Lock()
        self._inbox_posted = False
        self._dirty = False

    # --- layout and start ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with Vertical(id="main"):
                prompt = TextArea(self.options.prompt, id="prompt", soft_wrap=True)
                prompt.border_title = "prompt  (ctrl+r runs, escape stops)"
                yield prompt
                yield Static("", id="status")
                with Horizontal(id="lanes"):
                    yield LaneView("target", "target-only", id="target")
                    yield LaneView("speculative", "speculative", legend=legend(), id="speculative")
                yield DraftTape(id="tape")
            yield ControlsPanel(self.settings, self.seed, id="controls")
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
        self.set_interval(1 / REDRAW_HZ, self._redraw)
        self.host.load(self._loaded)

    def _loaded(self, drafters: tuple[str, ...] | None, identity: dict[str, Any], error: BaseException | None) -> None:
        """On the model thread."""
        if error is not None:
            self.post_message(ModelsFailed(error_line(error)))
        else:
            self.post_message(ModelsLoaded(drafters or (), identity))

    def on_models_loaded(self, message: ModelsLoaded) -> None:
        self.drafters, self.identity = message.drafters, message.identity
        self.query_one("#lanes").loading = False
        self.query_one(ControlsPanel).set_drafters(self.drafters)
        self.state = "ready"
        self._set_status(f"ready: target and drafters {', '.join(self.drafters) or '(none)'}; ctrl+r runs")
        if self.options.autorun:
            self.action_run()

    def on_models_failed(self, message: ModelsFailed) -> None:
        self.query_one("#lanes").loading = False
        self.state = "failed"
        self._set_status(f"models failed to load: {message.error} (ctrl+q quits)", error=True)

    # --- actions -----------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Run", "Generate in both lanes (ctrl+r)", self.action_run)
        yield SystemCommand("Stop", "Stop both lanes (escape)", self.action_stop)
        yield SystemCommand("Next theme", "Cycle the specplay themes (ctrl+t)", self.action_next_theme)

    def action_run(self) -> None:
        if self.state != "ready":
            self.notify(f"cannot run while {self.state}", severity="warning")
            return
        prompt = self.query_one("#prompt", TextArea).text
        if not prompt.strip():
            self._set_status("type a prompt first", error=True)
            return
        self.run_id += 1
        self.controls = {
            "speculative": LiveControls(self.settings, self.drafters),
            "target": LiveControls(self.settings),
        }
        self.events = {lane: [] for lane in LANES}
        self.tallies = {lane: LaneTally() for lane in LANES}
        for lane in LANES:
            self.query_one(f"#{lane}", LaneView).clear()
        self.query_one(DraftTape).clear()
        self._writer, self._run_prompt = None, prompt
        opts = self.options
        spec = RunSpec(prompt, self.settings, self.seed, opts.max_tokens, opts.ignore_eos, opts.raw)
        run_id = self.run_id
        self.state = "running"
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

    def action_next_theme(self) -> None:
        names = self._theme_names
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme {self.theme}")

    # --- live controls -----------------------------------------------------------------------

    def on_controls_panel_changed(self, message: ControlsPanel.Changed) -> None:
        if message.setting == "seed":
            self.seed = message.value
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
        # The speculative lane takes every change; the target-only lane only sampling changes,
        # so the two lanes keep sampling the same distribution.
        lanes = LANES if message.setting in _SAMPLING_FIELDS else ("speculative",)
        for lane in lanes:
            self.controls[lane].update(**{message.setting: message.value})

    # --- the stream --------------------------------------------------------------------------

    def _deliver(self, item: LaneItem) -> None:
        """On the model thread: queue the item, and wake the UI unless a wake-up is already pending."""
        self._inbox.append(item)
        with self._inbox_lock:
            if self._inbox_posted:
                return
            self._inbox_posted = True
        self.post_message(ItemsReady())

    def on_items_ready(self, _: ItemsReady) -> None:
        self._drain()

    def _drain(self) -> None:
        """Take every queued item, then redraw once."""
        with self._inbox_lock:
            self._inbox_posted = False  # before draining: an item queued from now on posts again
        taken = 0
        while self._inbox:
            item = self._inbox.popleft()
            if item.run_id == self.run_id:
                self._take(item)
                taken += 1
        self._dirty = self._dirty or taken > 0

    def _redraw(self) -> None:
        """At most REDRAW_HZ times a second: events arrive faster than anyone reads, and every
        redraw costs the UI thread time it needs for keys."""
        if not self._dirty:
            return
        self._dirty = False
        for lane in LANES:
            self.query_one(f"#{lane}", LaneView).flush()
        self.query_one(DraftTape).flush()
        self._show_stats()

    def _take(self, item: LaneItem) -> None:
        event, lane = item.event, item.lane
        self.events[lane].append(event)
        if self._writer is None and isinstance(event, StartEvent):
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
        }
        try:
            return SessionWriter(
                sessions_dir(self.options.sessions_dir),
                self._run_prompt,
                list(start.prompt_token_ids),
                list(LANES),
                self.identity,
                request,
            )
        except Exception as error:  # the run goes on unsaved; say why once
            self._set_status(f"not saving: {error_line(error)}", error=True)
            return None

    def _show_stats(self) -> None:
        spec, target = self.tallies["speculative"], self.tallies["target"]
        self.query_one("#target", LaneView).set_stats(target_stats(target))
        self.query_one("#speculative", LaneView).set_stats(speculative_stats(spec, compare(spec, target)))

    def on_run_ended(self, message: RunEnded) -> None:
        if message.run_id != self.run_id:
            return
        self._drain()  # events still queued belong before the end
        self._redraw()
        for lane in LANES:
            self.query_one(f"#{lane}", LaneView).flush(full=True)
        self.query_one(DraftTape).flush(full=True)
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
