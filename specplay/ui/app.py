"""The playground app: bindings, themes and the command palette around one screen.

All model work runs on the ModelHost's thread; the controller (controller.py) decides what a
key or a control does, and the screen (screens/playground.py) draws it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Select

from specplay.config.run_config import RunConfig
from specplay.display.text import one_line
from specplay.engine.costs import RoundCosts
from specplay.engine.stream import EventStream
from specplay.errors import SpecplayError
from specplay.review import export_review, reviews_dir
from specplay.runner.host import ModelHost, OpenStream
from specplay.ui.command_palette import palette_commands
from specplay.ui.controller import PlaygroundController
from specplay.ui.messages import (
    CostsMeasured,
    LaneEventsArrived,
    ModelsLoaded,
    ModelsWaiting,
    RunEnded,
    TokenTextsArrived,
)
from specplay.ui.opened import open_saved
from specplay.ui.screens.playground import PlaygroundScreen
from specplay.ui.screenshot import save_screenshot, screenshots_dir
from specplay.ui.theming import DEFAULT_THEME, load_themes
from specplay.ui.widgets.controls_panel import ControlsPanel
from specplay.ui.widgets.inspector import Inspector
from specplay.ui.widgets.lane_view import LaneView


@dataclass(frozen=True)
class PlaygroundOptions:
    """What only the playground takes; the rest is the run configuration."""

    autorun: bool = False
    """Run the prompt as soon as the models are loaded."""
    theme: str = DEFAULT_THEME
    draft_lane: bool = False
    """Start with the draft-only lane shown (a switch in the controls turns it on and off)."""
    open_session: Path | None = None
    """A saved session to show read-only at start; ctrl+r or the palette re-runs it."""
    load_on_run: bool = False
    """Load the models (contact the servers) only when a run is asked for, not at start."""


def create_app(
    config: RunConfig,
    options: PlaygroundOptions | None = None,
    clock: Callable[[], float] = time.perf_counter,
    open_stream: OpenStream | None = None,
) -> PlaygroundApp:
    """The playground over `config` (its request's prompt pre-fills the editor); the models load on
    the app's model thread; `clock` times the lanes and `open_stream` opens what `config` names
    (the tests' scripted backend and its simulated clock make screens repeatable)."""
    host = ModelHost(config, clock, open_stream)
    return PlaygroundApp(config, options or PlaygroundOptions(), host)


class Messages:
    """The controller's outbox as Textual messages, posted (thread-safely) to the main screen: the
    frame messages are the screen's; the others bubble up to the app."""

    def __init__(self, app: PlaygroundApp) -> None:
        self._app = app

    def models_loaded(
        self, stream: EventStream | None, identity: dict[str, Any], error: BaseException | None, autorun: bool
    ) -> None:
        self._app.main.post_message(ModelsLoaded(stream, identity, error, autorun))

    def run_ended(self, run_id: int, error: BaseException | None) -> None:
        self._app.main.post_message(RunEnded(run_id, error))

    def lane_events_arrived(self) -> None:
        self._app.main.post_message(LaneEventsArrived())

    def models_waiting(self) -> None:
        self._app.main.post_message(ModelsWaiting())

    def token_texts_arrived(self) -> None:
        self._app.main.post_message(TokenTextsArrived())

    def costs_measured(self, costs: RoundCosts | None, error: BaseException | None) -> None:
        self._app.main.post_message(CostsMeasured(costs, error))


class PlaygroundApp(App[None]):
    TITLE = "specplay"
    SUB_TITLE = "speculative decoding, side by side"
    CSS_PATH = "playground.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_conversation", "New conversation", priority=True),
        Binding("f2", "toggle_draft_lane", "Draft lane", priority=True),
        Binding("f3", "inspect_last", "Inspect", priority=True),
        Binding("f4", "pick_prompt", "Prompts", priority=True),
        Binding("ctrl+t", "next_theme", "Theme", priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f12", "screenshot", "Screenshot", show=False),
    ]

    def __init__(self, config: RunConfig, options: PlaygroundOptions, host: ModelHost) -> None:
        super().__init__()
        self.options = options
        # One direction: the controller posts to the screen; the screen reads the run read-only.
        self.playground = PlaygroundController(config, host, Messages(self), options.draft_lane)
        self.main = PlaygroundScreen(config.request.prompt or "", self.playground)
        self.playground.attach(self.main)
        self._theme_names: list[str] = []
        self.crash: BaseException | None = None
        """What ended the app, if an exception did: `specplay tui` says it in one line and fails."""

    def _handle_exception(self, error: Exception) -> None:
        # Textual's hook for an exception nothing else handled; the app ends either way.
        self.crash = error
        super()._handle_exception(error)

    def _fatal_error(self) -> None:
        # Textual would print a screen of traceback and exit 0; the command prints one line instead.
        self._close_messages_no_wait()

    def on_models_loaded(self, message: ModelsLoaded) -> None:
        self.playground.loaded(message.stream, message.identity, message.error, message.autorun)

    def on_run_ended(self, message: RunEnded) -> None:
        self.playground.ended(message.run_id, message.error)

    def on_costs_measured(self, message: CostsMeasured) -> None:
        self.playground.costs_measured(message.costs, message.error)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Themes without token colours (Textual's own) fall back to the default theme's.
        defaults = next((t.variables for t in load_themes() if t.name == DEFAULT_THEME), {})
        return {**super().get_theme_variable_defaults(), **defaults}

    def get_default_screen(self) -> Screen:
        return self.main

    def on_mount(self) -> None:
        for theme in load_themes():
            self.register_theme(theme)
            self._theme_names.append(theme.name)
        self.theme = self.options.theme if self.options.theme in self.available_themes else DEFAULT_THEME

    def on_playground_screen_ready(self) -> None:
        """The screen is up: show the session to open, if any, and load the models."""
        if self.options.open_session is not None:
            open_saved(self.playground, self.options.open_session)
        if self.options.load_on_run and not self.options.autorun:
            self.playground.load_on_run()
        else:
            self.playground.load(autorun=self.options.autorun)

    def on_unmount(self) -> None:
        self.playground.close()

    # --- actions -----------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's own screenshot command saves into a downloads folder that may not exist.
        yield from (c for c in super().get_system_commands(screen) if c.title != "Screenshot")
        yield from palette_commands(self)

    def session_to_export(self) -> Path | None:
        """The session on show: the one opened read-only, else the last run's saved one."""
        opened = self.playground.opened
        return opened.path if opened is not None else self.playground.last_session

    @work(thread=True, group="export")
    def export_review(self, fmt: str) -> None:
        # Off the UI thread: a long session's page takes a moment to build.
        path = self.session_to_export()
        if path is None:
            return
        try:
            written = export_review(path, fmt, reviews_dir(self.playground.config.sessions_dir))
        except SpecplayError as error:
            self.call_from_thread(self.notify, one_line(str(error)), title="Export", severity="error", markup=False)
            return
        self.call_from_thread(self.notify, f"Wrote {written}", title="Export", markup=False)

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        """Textual's screenshot, saved beside the sessions (the arguments of Textual's own action are ignored)."""
        self._save_screenshot(self.export_screenshot(), datetime.now())

    @work(thread=True, group="screenshot")
    def _save_screenshot(self, svg: str, now: datetime) -> None:
        # Off the UI thread: converting to PNG takes a moment. Not exclusive: a second key press
        # before the first worker starts would cancel it, and its screenshot would be lost.
        try:
            svg_path, png = save_screenshot(svg, screenshots_dir(self.playground.config.sessions_dir), now)
        except SpecplayError as error:
            self.call_from_thread(self.notify, one_line(str(error)), title="Screenshot", severity="error", markup=False)
            return
        saved = f"{svg_path}" + (f" and {png.name}" if png is not None else " (install rsvg-convert for a PNG too)")
        self.call_from_thread(self.notify, f"Saved {saved}", title="Screenshot", markup=False)

    def action_run(self) -> None:
        self.playground.run()

    def action_stop(self) -> None:
        self.playground.stop()

    def action_new_conversation(self) -> None:
        self.playground.new_conversation()

    def action_toggle_draft_lane(self) -> None:
        self.playground.change("draft_lane", not self.playground.draft_lane)

    def action_inspect_last(self) -> None:
        lane = self.main.query_one("#speculative", LaneView)
        lane.focus()
        if lane.picks:
            lane.select(lane.selected if lane.selected is not None else len(lane.picks) - 1)

    def action_pick_prompt(self) -> None:
        library = self.main.query_one("#library", Select)
        library.focus()
        library.action_show_overlay()

    def use_prompt(self, index: int) -> None:
        self.main.show_prompt(self.main.library[index].text)

    def action_next_theme(self) -> None:
        names = self._theme_names
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme {self.theme}")

    def action_rerun_session(self) -> None:
        if self.playground.rerun_session():
            self.call_after_refresh(self.action_run)  # after the controls' own change messages

    # --- messages from the widgets -----------------------------------------------------------

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "library" and isinstance(event.value, int):
            self.use_prompt(event.value)

    def on_controls_panel_changed(self, message: ControlsPanel.Changed) -> None:
        self.playground.change(message.setting, message.value)

    def on_lane_view_selected(self, message: LaneView.Selected) -> None:
        self.main.query_one(Inspector).show(message.pick, self.playground.decode)
