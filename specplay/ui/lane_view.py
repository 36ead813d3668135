"""One lane: its streaming text, coloured by token source, with markers of live changes and its stats.

While a lane generates it shows the tail of its text that fits the view, so a redraw costs the
same at token 5 and at token 5,000; when the run ends the whole text is shown, to scroll back.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Static

from specplay.engine.events import ControlEvent, Event, RoundEvent, StepEvent
from specplay.ui.tokens import marker_content, token_content

MIN_TAIL_CHARS = 400


class LaneView(Vertical):
    DEFAULT_CSS = """
    LaneView { border: round $panel-lighten-2; padding: 0 1; }
    LaneView > .lane-scroll { height: 1fr; }
    LaneView .lane-text { height: auto; }
    LaneView > .lane-stats { height: auto; color: $text-muted; border-top: solid $panel-lighten-2; }
    LaneView > .lane-legend { height: auto; }
    """

    def __init__(self, lane: str, title: str, legend: Content | None = None, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lane = lane
        self.border_title = title
        self._legend = legend
        self._parts: list[Content] = []

    def compose(self) -> ComposeResult:
        if self._legend is not None:
            yield Static(self._legend, classes="lane-legend")
        with VerticalScroll(classes="lane-scroll"):
            yield Static("", classes="lane-text")
        yield Static("", classes="lane-stats")

    @property
    def text(self) -> str:
        """The lane's plain text, markers included (for tests and copying)."""
        return "".join(part.plain for part in self._parts)

    def clear(self) -> None:
        self._parts.clear()
        self.flush(full=True)
        self.set_stats(Content(""))

    def add(self, event: Event) -> None:
        """Take an event; the text shows it at the next `flush`."""
        if isinstance(event, RoundEvent):
            self._parts += [token_content(token) for token in event.tokens]
        elif isinstance(event, StepEvent):
            self._parts.append(token_content(event.token))
        elif isinstance(event, ControlEvent):
            self._parts.append(marker_content(event.changes))

    def set_stats(self, stats: Content) -> None:
        self.query_one(".lane-stats", Static).update(stats)

    def flush(self, full: bool = False) -> None:
        """Show the text: its tail that fills the view, or all of it."""
        scroll = self.query_one(".lane-scroll", VerticalScroll)
        width, height = scroll.size
        start = 0 if full else self._tail_start(max(MIN_TAIL_CHARS, width * (height + 2)))
        parts = self._parts[start:]
        if start:
            parts = [Content.styled(f"… {start} earlier\n", "dim"), *parts]
        self.query_one(".lane-text", Static).update(Content.assemble(*parts))
        scroll.scroll_end(animate=False, immediate=False)

    def _tail_start(self, chars: int) -> int:
        total = 0
        for i in range(len(self._parts) - 1, -1, -1):
            total += len(self._parts[i].plain)
            if total > chars:
                return i + 1
        return 0
