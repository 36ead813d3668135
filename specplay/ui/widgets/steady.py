"""Text updated without a layout: heights that only grow, or that are fixed to the view.

A widget that changes height makes Textual lay out and repaint the whole screen, and on a machine
whose cores the models keep busy that time comes out of generation. Stats and plots gain lines
as a run goes on (a baseline to compare with, more draft positions); padded to the most lines
they have shown, they change height a few times a session rather than a few times a run. A
streaming text (a lane's tail, the draft tape) is as tall as its view while a run goes.
"""

from __future__ import annotations

from textual.containers import ScrollableContainer
from textual.content import Content
from textual.css.scalar import Unit
from textual.widgets import Static


def steady_update(widget: Static, content: Content, lines: int, shown: int) -> int:
    """Show `content`, `lines` tall, in `widget`, which shows `shown` lines now: blank lines pad it
    to that height, and only a taller text asks for a layout. Returns the height now shown."""
    if lines < shown:
        content = Content.assemble(content, "\n" * (shown - lines))
    widget.update(content, layout=lines > shown)
    return max(lines, shown)


def show_in_view(text: Static, view: ScrollableContainer, content: Content) -> None:
    """Show `content` in `text`, made as tall as `view` (scrolled home) the first time: from then
    on its updates need no layout."""
    if text.styles.height is None or text.styles.height.unit != Unit.FRACTION:
        text.styles.height = "1fr"
        view.scroll_home(animate=False)
    text.update(content, layout=False)
