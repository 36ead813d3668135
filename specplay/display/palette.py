"""How token sources look, shared by the terminal, exported transcripts and the playground."""

from __future__ import annotations

SOURCE_STYLES = {
    "accepted": "green",
    "budget": "yellow",
    "corrected": "red",
    "bonus": "bold blue",
    "target": "",
    "draft": "",
}
"""Rich styles per token source (see specplay.engine.events.Source)."""

# Model output may hold terminal control bytes (ESC could recolour or clear the screen): show
# them as Unicode control pictures, keeping newlines and tabs.
_VISIBLE: dict[int, int | str] = {code: 0x2400 + code for code in range(0x20) if chr(code) not in "\n\t"}
_VISIBLE[0x7F] = 0x2421
_VISIBLE |= {code: f"\\x{code:02x}" for code in range(0x80, 0xA0)}


def visible(text: str) -> str:
    """Model text safe to print to a terminal."""
    return text.translate(_VISIBLE)
