"""Token text as Textual Content styled by theme variables, so a theme switch recolours it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.content import Content

from specplay.display.text import change_label, visible
from specplay.engine.events import Token

SPECULATIVE_SOURCES = ("accepted", "relaxed", "corrected", "bonus")
MARKER_STYLE = "reverse $spec-marker"


def source_style(source: str) -> str:
    """`$spec-<source>` for the speculative sources; target and draft tokens keep the text colour."""
    return f"$spec-{source}" if source in SPECULATIVE_SOURCES else ""


def token_content(token: Token) -> Content:
    return Content.styled(visible(token.text), source_style(token.source))


def marker_content(changes: Iterable[tuple[str, Any, Any]]) -> Content:
    """Where live changes took effect in a stream: ⟨k=2 route=far⟩, apart from the tokens around it
    (a marker glued to a word reads as part of it when colours are lost)."""
    return Content.assemble(" ", Content.styled(change_label(changes), MARKER_STYLE), " ")


def turn_content(index: int, prompt: str) -> Content:
    """Where a conversation's turn `index` (from 0) begins in a lane's text: on lines of its own,
    the user's prompt after a label in the markers' style."""
    label = Content.styled(f" you, turn {index + 1} ", MARKER_STYLE)
    return Content.assemble("\n\n", label, " ", (visible(prompt), "bold"), "\n\n")


def legend() -> Content:
    parts: list[Content | str] = []
    for source in SPECULATIVE_SOURCES:
        parts += [Content.styled("■ " + source, source_style(source)), "  "]
    parts.append(Content.styled("⟨change⟩", MARKER_STYLE))
    return Content.assemble(*parts)
