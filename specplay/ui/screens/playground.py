"""The playground screen: a prompt, lanes side by side (target-only, speculative, optionally
draft-only), live controls, the draft tape, token drill-down and plots. It draws what the
controller (ui/controller.py) decides, as the controller's View, and reads the run through the
read-only `RunReadout`; frames while lanes generate follow the messages in ui/messages.py.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Select, Static, TextArea

from specplay.data.library import library_prompts
from specplay.display.text import one_line, visible
from specplay.engine.capabilities import Capabilities
from specplay.engine.events import Event, RoundEvent
from specplay.engine.settings import SpecSettings
from specplay.runner.host import DRAFT_LANE
from specplay.ui.frame_budget import FrameBudget
from specplay.ui.lane_board import ALL_LANES
from specplay.ui.messages import LaneEventsArrived, ModelsWaiting, TokenTextsArrived
from specplay.ui.phrased import lines_of, prose
from specplay.ui.protocols import RunReadout
from specplay.ui.stats import compare, conversation_figures, disturbance
from specplay.ui.tokens import legend
from specplay.ui.widgets.controls_panel import ControlsPanel
from specplay.ui.widgets.inspector import Inspector, InspectorBox
from specplay.ui.widgets.lane_view import LaneView
from specplay.ui.widgets.plots import Plots
from specplay.ui.widgets.stats_view import (
    NO_BASELINE,
    in_conversation,
    route_stats,
    server_account_stats,
    speculative_stats,
    target_stats,
)
from specplay.ui.widgets.tape import DraftTape


class PlaygroundScreen(Screen[None]):
    class Ready(Message):
        """The screen's widgets exist: the controller may draw."""

    def __init__(self, prompt: str, playground: RunReadout) -> None:
        super().__init__()
        self._prompt = prompt
        self.playground = playground
        """The run this screen draws: read-only, and the frame commands."""
        self.library = library_prompts()
        self._dirty = False
        self._budget = FrameBudget()
        self._cursors_lit = False
        self._frame_asked = False
        """A frame waits for the models' next event boundary."""
        self._frame_timer = False
        """A frame is set for when the budget allows it."""
        self._status_lines = 1
        """The lines the status line took when last shown: a change of them needs a layout."""

    def compose(self) -> ComposeResult:
        settings, seed = self.playground.settings, self.playground.seed
        yield Header()
        # Tab goes through widgets in this order: the prompt, then the controls (docked on the
        # right, so their place here sets only the order), then the lanes and the tape.
        with Vertical(id="body"):
            with Horizontal(id="prompt-row"):
                prompt = TextArea(visible(self._prompt), id="prompt", soft_wrap=True)
                prompt.border_title = "prompt  (ctrl+r runs, escape stops)"
                yield prompt
                options = [(p.label, i) for i, p in enumerate(self.library)]
                yield Select(options, prompt="prompt library", id="library")
            with Vertical(id="side"):
                yield ControlsPanel(settings, seed, id="controls")
                yield Plots(id="plots")
            yield Static("", id="status")
            with Horizontal(id="lanes"):
                yield LaneView("target", "target-only", id="target")
                yield LaneView("speculative", "speculative", legend=legend(), selectable=True, id="speculative")
                draft = LaneView(DRAFT_LANE, "draft-only", id=DRAFT_LANE)
                draft.display = self.playground.draft_lane
                yield draft
            with Horizontal(id="bottom"):
                yield DraftTape(id="tape")
                yield InspectorBox(id="inspector")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#lanes").loading = True
        self.query_one("#prompt", TextArea).focus()
        if self.playground.draft_lane:
            self.query_one("#draft-lane").value = True  # type: ignore[attr-defined]
        self.post_message(self.Ready())

    # --- the controller's View ---------------------------------------------------------------

    def show_status(self, text: str, error: bool = False) -> None:
        """Wrapped at words, up to three lines beside the controls, so nothing it says is cut off
        (an error up to four, so its fix is read whole). An update that keeps the line count needs
        no layout, during runs too."""
        shown = self.query("#status").results(Static)
        status = next(shown, None)
        if status is None:  # a key pressed before the first frame: loading says it again once up
            return
        content = Content(one_line(text))
        lines = len(content.wrap(max(1, status.content_region.width or self.size.width)))
        status.set_class(error, "error")
        status.update(content, layout=error or lines != self._status_lines)
        self._status_lines = lines

    def show_load_failed(self) -> None:
        self.query_one("#lanes").loading = False  # nothing is loading any more: the status line says why

    def notify_user(self, text: str, error: bool = False) -> None:
        self.app.notify(one_line(text), severity="error" if error else "information", markup=False)

    def show_loaded(self, drafters: tuple[str, ...], capabilities: Capabilities) -> None:
        self.query_one("#lanes").loading = False
        panel = self.query_one(ControlsPanel)
        panel.set_drafters(drafters, capabilities.round_routes)
        panel.limit_to(capabilities.rules, capabilities.counterfactual and len(drafters) > 1, capabilities.trees)
        if not capabilities.live_controls:
            panel.fix_speculation(capabilities.fixed_by or "fixed by the backend", routes=len(drafters) > 1)
        self._show_no_baseline()

    def show_settings(self, settings: SpecSettings, seed: int) -> None:
        self.query_one(ControlsPanel).show(settings, seed)

    def show_prompt(self, text: str) -> None:
        self._prompt = text
        self.query_one("#prompt", TextArea).text = visible(text)

    def current_prompt(self) -> str:
        """The prompt to run: as given, unless the user edited what the editor shows of it (a
        prompt's control characters are shown as pictures, never sent to the terminal)."""
        shown = self.query_one("#prompt", TextArea).text
        return self._prompt if shown == visible(self._prompt) else shown

    def offer_follow_up(self) -> None:
        self.query_one("#prompt", TextArea).select_all()

    def show_draft_lane(self, shown: bool, note: str = "") -> None:
        lane = self.query_one(f"#{DRAFT_LANE}", LaneView)
        lane.display = shown
        if note:
            lane.show_note(note)
        switch = self.query_one("#draft-lane")
        if switch.value != shown:  # type: ignore[attr-defined]
            switch.value = shown  # type: ignore[attr-defined]

    def clear_lanes(self) -> None:
        for lane in ALL_LANES:
            self.query_one(f"#{lane}", LaneView).clear()
        self.query_one(DraftTape).clear()
        self.query_one(Inspector).show(None, self.playground.decode)
        self._show_no_baseline()
        self._budget.drawn()
        self._frame_asked = False

    def start_turn(self, index: int, prompt: str) -> None:
        for lane in self.playground.lanes:
            self.query_one(f"#{lane}", LaneView).start_turn(index, prompt)
        self.query_one(DraftTape).start_turn(index)
        self._dirty = True

    def add_event(self, lane: str, event: Event, drafted_text: tuple[str, ...]) -> None:
        self.query_one(f"#{lane}", LaneView).add(event)
        if isinstance(event, RoundEvent):
            self.query_one(DraftTape).add(event, drafted_text)
        self._dirty = True

    @on(TokenTextsArrived)
    def show_token_texts(self) -> None:
        self.query_one(Inspector).refresh_texts(self.playground.decode)
        if not self.playground.state.generating:  # an opened session's rejected drafts; a run's come decoded
            tape = self.query_one(DraftTape)
            tape.refresh_texts(self.playground.decode)
            tape.flush(full=True)

    def when_drawn(self, then: Callable[[], None]) -> None:
        self.call_after_refresh(then)

    def redraw(self, full: bool) -> None:
        self._frame_asked = False
        self._dirty = True
        self._redraw()
        self._light_cursors(self.playground.state.generating)
        if full:
            for lane in self.playground.lanes:
                self.query_one(f"#{lane}", LaneView).flush(full=True)
            self.query_one(DraftTape).flush(full=True)

    # --- frames ------------------------------------------------------------------------------

    @on(LaneEventsArrived)
    def _events_arrived(self) -> None:
        """Lane events wait: take them in a frame, as soon as the frame budget allows. Where the
        lanes' models share this machine, the frame waits for their next event boundary and they
        wait for the frame (runner/gate.py): drawn during their compute it would take their CPU
        and GIL, and their tokens/s would read low."""
        if not self.playground.state.generating:
            self._draw()
            return
        self._light_cursors(True)
        if self._frame_asked or self._frame_timer:
            return
        wait_s = self._budget.wait_s()
        if wait_s > 0:
            self._frame_timer = True
            self.set_timer(wait_s, self._frame_due)
            return
        self._frame_due()

    def _frame_due(self) -> None:
        self._frame_timer = False
        if not self.playground.state.generating:
            self._draw()
            return
        self._budget.drawn()
        if self.playground.draw_between_turns():
            self._frame_asked = True
        else:
            self._draw()

    @on(ModelsWaiting)
    def _draw_between_turns(self) -> None:
        """The models wait: draw, and let them go on after the screen's next refresh (in Textual
        usually after this frame's paint; a widget that reports its change late paints after)."""
        self._frame_asked = False
        self._draw()
        self.call_after_refresh(self.playground.release_models)

    def _draw(self) -> None:
        self.playground.drain()
        self._redraw()

    def _light_cursors(self, lit: bool) -> None:
        """While lanes generate, text cursors stay lit rather than blink: each blink repaints its
        widget, twice a second, on the UI thread."""
        if lit == self._cursors_lit:
            return
        self._cursors_lit = lit
        for widget in (*self.query(TextArea), *self.query(Input)):
            widget.cursor_blink = not lit

    def _redraw(self) -> None:
        """Show what was taken since the last redraw: one update per widget however many events."""
        if not self._dirty:
            return
        self._dirty = False
        # Events drained after a run ended (a lane's last ones can arrive after its full redraw)
        # are shown in the full, scrollable form, not as a running tail over it.
        full = not self.playground.state.generating
        for lane in self.playground.lanes:
            self.query_one(f"#{lane}", LaneView).flush(full=full)
        self.query_one(DraftTape).flush(full=full)
        self._show_stats()

    def _show_stats(self) -> None:
        playground = self.playground
        tallies, lanes = playground.tallies, playground.lanes
        speculative, target = tallies["speculative"], tallies["target"]
        # A reopened session is shown as it ran, whatever backend is loaded now.
        caps = playground.shown_capabilities
        baseline = target if "target" in lanes and caps.wall_time_is_speed else None
        comparison = compare(speculative, baseline, playground.costs)
        if caps.server_judges:  # the server's own account, measured against a baseline
            stats = {"speculative": server_account_stats(speculative, comparison if baseline else None)}
        else:
            stats = {"speculative": speculative_stats(speculative, comparison, remote=not caps.wall_time_is_speed)}
        stats |= {lane: target_stats(tallies[lane]) for lane in ("target", DRAFT_LANE) if lane in lanes}
        disturbed = {"speculative": comparison.disturbed}
        if len(playground.turn_tallies("speculative")) > 1:  # a conversation's later turn
            figures = {name: conversation_figures(playground.turn_tallies(name)) for name in stats}
            if baseline is not None:  # the speedup over every turn: busy where any turn's was
                disturbed["speculative"] = disturbance(*map(playground.turn_tallies, ("speculative", "target")))
            for name in stats:
                drafts = name == "speculative"
                # Acceptance where the lane's rounds say it (not a server's guess from chunks), and
                # tokens/s where it is a speed (the speculative lane's are HTTP round trips remotely).
                judged, speed = drafts and not caps.server_judges, not drafts or caps.wall_time_is_speed
                against = figures.get("target") if drafts and baseline is not None else None
                busy = disturbed.get(name)
                stats[name] = in_conversation(stats[name], figures[name], against, judged, speed, disturbed=busy)
        for name, content in stats.items():
            self.query_one(f"#{name}", LaneView).set_stats(content, disturbed.get(name))
        self.query_one(Plots).show(speculative, playground.costs, comparison.k_in_use)
        self.query_one(ControlsPanel).show_route_stats(route_stats(speculative))

    def _show_no_baseline(self) -> None:
        if not self.playground.capabilities.baseline:
            self.query_one("#target", LaneView).set_stats(lines_of(prose(NO_BASELINE)))
