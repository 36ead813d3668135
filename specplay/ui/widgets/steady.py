"""Text whose height only grows.

A widget that changes height makes Textual lay out and repaint the whole screen, and on a machine
whose cores the models keep busy that time comes out of generation. Stats and plots gain lines
as a run goes on (a baseline to compare with, more draft positions); padded to the most lines
they have shown, they change height a few times a session rather than a few times a run.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static


def steady_update(widget: Static, content: Content, lines: int, shown: int) -> int:
    """Show `content`, `lines` tall, in `widget`, which shows `shown` lines now: blank lines pad it
    to that height, and only a taller text asks for a layout. Returns the height now shown."""
    if lines < shown:
        content = Content.assemble(content, "\n" * (shown - lines))
    widget.update(content, layout=lines > shown)
    return max(lines, shown)
