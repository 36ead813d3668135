"""A box whose text scrolls past the rows it has, never cut: a lane's stats, the token drill-down."""

from __future__ import annotations

from textual.containers import VerticalScroll


class ScrollBox(VerticalScroll, can_focus=False):
    """Its text scrolls when taller than the box, with a scrollbar that says so, and the wheel."""

    def allow_focus(self) -> bool:
        """A tab stop only while it scrolls: then the keys scroll it to the lines out of view."""
        return self.max_scroll_y > 0
