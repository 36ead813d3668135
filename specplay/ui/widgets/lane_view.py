"""One lane: its streaming text, coloured by token source, with markers of live changes and its stats.

While a lane generates it shows exactly the lines of its tail that fit the view, in a text of
fixed height: a redraw then costs the same at token 5 and at token 5,000 and needs no layout of
the screen (a layout repaints every widget, and that time is taken from the model thread, which
shares the GIL). When the run ends the whole text is shown, to scroll back, and tokens become
clickable: a selectable lane lets the user pick a token (click, or focus it and use the arrow
keys) to see the verifier's numbers for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.events import Click
from textual.message import Message
from textual.style import Style
from textual.widgets import Static

from specplay.engine.events import ControlEvent, Event, RecolourEvent, RoundEvent, StepEvent, Token, TokenSource
from specplay.ui.phrased import Phrased
from specplay.ui.tokens import marker_content, token_content, turn_content
from specplay.ui.widgets.stats_view import StatsBox, StatsText, stats_key
from specplay.ui.widgets.steady import show_in_view

MIN_TAIL_CHARS = 400
MIN_TEXT_ROWS = 1
"""What a lane's text keeps where its stats want every other row: the numbers come first."""
MIN_STATS_ROWS = 2
"""The stats' box at the least, its top border and a line (it scrolls to the rest)."""
SELECTED_STYLE = "reverse"


@dataclass(frozen=True, slots=True)
class Pick:
    """A token of a lane, with the round that committed it (None for a target/draft step)."""

    index: int
    """Its index among the lane's tokens."""
    token: Token
    round: RoundEvent | None
    slot: int
    """Its index within the round's tokens: slot i < len(positions) is drafted position i."""


class LaneView(Vertical, can_focus=True):
    DEFAULT_CSS = """
    LaneView { border: round $spec-border; padding: 0 1; }
    LaneView:focus-within { border: round $primary; }
    LaneView > .lane-scroll { height: 1fr; }
    LaneView .lane-text { height: auto; }
    LaneView > .lane-stats-box { height: auto; border-top: solid $spec-border; scrollbar-size-vertical: 1; }
    LaneView .lane-stats { height: auto; color: $text-muted; }
    LaneView > .lane-legend { height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "select(-1)", "Previous token", show=False),
        Binding("right", "select(1)", "Next token", show=False),
        Binding("home", "select_at(0)", "First token", show=False),
        Binding("end", "select_at(-1)", "Last token", show=False),
    ]

    class Selected(Message):
        """The user picked a token of this lane."""

        def __init__(self, lane: LaneView, pick: Pick) -> None:
            super().__init__()
            self.lane = lane
            self.pick = pick

    def __init__(
        self, lane: str, title: str, legend: Content | None = None, selectable: bool = False, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.lane = lane
        self.border_title = title
        self.can_focus = selectable
        self.selectable = selectable
        self._legend = legend
        self._parts: list[Content] = []
        self.picks: list[Pick] = []
        self._pick_parts: list[int] = []
        """Index in _parts of each pick's text."""
        self.selected: int | None = None

    def compose(self) -> ComposeResult:
        if self._legend is not None:
            yield Static(self._legend, classes="lane-legend")
        # The lane is the tab stop (when its tokens can be picked), not its scroll area: the wheel scrolls.
        with VerticalScroll(classes="lane-scroll", can_focus=False):
            yield Static("", classes="lane-text")
        with StatsBox(classes="lane-stats-box"):
            stats = StatsText(classes="lane-stats")
            stats.tooltip = stats_key()
            yield stats

    def on_resize(self) -> None:
        """The stats take the rows they need and the text what is left, down to MIN_TEXT_ROWS;
        stats taller than that scroll in their box (Textual would give the text no rows and cut
        the stats' last lines at the lane's border)."""
        width, rows = self.content_size
        if self._legend is not None:
            rows -= len(self._legend.wrap(width)) if width > 0 else 1
        self.query_one(StatsBox).styles.max_height = max(MIN_STATS_ROWS, rows - MIN_TEXT_ROWS)

    @property
    def text(self) -> str:
        """The lane's plain text, markers included (for tests and copying)."""
        return "".join(part.plain for part in self._parts)

    def clear(self) -> None:
        """Empty the lane for a run, already in its fixed-height form (stats keep their height), so
        the run's first frames need no layout."""
        self._parts.clear()
        self.picks.clear()
        self._pick_parts.clear()
        self.selected = None
        self._show_tail(Content(""))
        self.set_stats(Phrased())

    def show_note(self, text: str) -> None:
        """A line in place of the text, until a run fills the lane (why it is empty)."""
        self._show_tail(Content.styled(text, "dim italic"))

    def start_turn(self, index: int, prompt: str) -> None:
        """A conversation's next turn: the user's prompt marks where it begins in the text."""
        self._parts.append(turn_content(index, prompt))

    def add(self, event: Event) -> None:
        """Take an event; the text shows it at the next `flush`."""
        if isinstance(event, RoundEvent):
            for slot, token in enumerate(event.tokens):
                self._add_token(token, event, slot)
        elif isinstance(event, StepEvent):
            self._add_token(event.token, None, 0)
        elif isinstance(event, ControlEvent):
            self._parts.append(marker_content(event.changes))
        elif isinstance(event, RecolourEvent):
            self._recolour(event.sources)

    def _recolour(self, sources: Sequence[TokenSource]) -> None:
        """A remote speculator's exact account replaces the sources its stream suggested."""
        for pick, source in zip(list(self.picks), sources, strict=False):
            token = replace(pick.token, source=source)
            self.picks[pick.index] = replace(pick, token=token)
            self._parts[self._pick_parts[pick.index]] = token_content(token)

    def _add_token(self, token: Token, round: RoundEvent | None, slot: int) -> None:
        self.picks.append(Pick(len(self.picks), token, round, slot))
        self._pick_parts.append(len(self._parts))
        self._parts.append(token_content(token))

    def set_stats(self, stats: Phrased, disturbed: str | None = None) -> None:
        """`disturbed`: why the lane's measured speedup is marked busy, said in the stats' tooltip."""
        widget = self.query_one(StatsText)
        widget.show(stats)
        if (key := stats_key(disturbed)) != widget.tooltip:
            widget.tooltip = key

    def flush(self, full: bool = False) -> None:
        """Show the text: the lines of its tail that fill the view, or all of it (also while a
        token is picked, so the pick stays on screen)."""
        if full or self.selected is not None:
            self._show_all()
            return
        width, height = self.query_one(".lane-scroll", VerticalScroll).size
        if width <= 0 or height <= 0:
            return
        start = self._tail_start(max(MIN_TAIL_CHARS, width * (height + 2)))
        lines = Content.assemble(*self._parts[start:]).wrap(width)[-height:]
        self._show_tail(Content("\n").join(lines))

    def _show_tail(self, tail: Content) -> None:
        show_in_view(self.query_one(".lane-text", Static), self.query_one(".lane-scroll", VerticalScroll), tail)

    def _show_all(self) -> None:
        parts = list(self._parts)
        if self.selectable:  # which token a click lands on: read back from the style under the mouse
            for index, at in enumerate(self._pick_parts):
                parts[at] = parts[at].stylize(Style.from_meta({"pick": index}))
            if self.selected is not None:
                at = self._pick_parts[self.selected]
                parts[at] = parts[at].stylize(SELECTED_STYLE)
        text = self.query_one(".lane-text", Static)
        text.styles.height = "auto"
        text.update(Content.assemble(*parts))
        if self.selected is None:
            # After the refresh that lays the whole text out: scrolled before it, the view stops
            # short of the last line by what the new height added.
            scroll = self.query_one(".lane-scroll", VerticalScroll)
            self.call_after_refresh(scroll.scroll_end, animate=False, immediate=False)

    def _tail_start(self, chars: int) -> int:
        total = 0
        for i in range(len(self._parts) - 1, -1, -1):
            total += len(self._parts[i].plain)
            if total > chars:
                return i + 1
        return 0

    # --- selection ---------------------------------------------------------------------------

    def select(self, index: int | None) -> None:
        """Pick token `index` (None: no token) and say so."""
        if index is not None and not self.picks:
            return
        self.selected = None if index is None else max(0, min(index, len(self.picks) - 1))
        self.flush(full=True)  # the whole text: the picked token may lie before the tail
        if self.selected is not None:
            self.post_message(self.Selected(self, self.picks[self.selected]))
            self._scroll_to_selected()

    def _scroll_to_selected(self) -> None:
        """Keep the picked token in view: scroll to its share of the text (lines wrap unevenly)."""
        if self.selected is None:
            return
        scroll = self.query_one(".lane-scroll", VerticalScroll)
        before = sum(len(p.plain) for p in self._parts[: self._pick_parts[self.selected]])
        share = before / max(1, len(self.text))
        scroll.scroll_to(y=max(0, share * scroll.virtual_size.height - scroll.size.height / 2), animate=False)

    def action_select(self, step: int) -> None:
        if self.selected is None:
            self.select(len(self.picks) - 1 if step < 0 else 0)
        else:
            self.select(self.selected + step)

    def action_select_at(self, index: int) -> None:
        self.select(index if index >= 0 else len(self.picks) + index)

    def on_click(self, event: Click) -> None:
        pick = event.style.meta.get("pick") if self.selectable else None
        if isinstance(pick, int):
            self.focus()
            self.select(pick)
