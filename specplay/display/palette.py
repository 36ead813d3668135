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
