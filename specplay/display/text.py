"""Text from outside (model output, prompts, files, server replies) made safe to show.

A terminal obeys control bytes: ESC can clear the screen or set the window title. Everything a
model, a session, a file or a server wrote is shown through `visible`, which turns control
characters into their Unicode pictures and keeps newlines and tabs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_VISIBLE: dict[int, int | str] = {code: 0x2400 + code for code in range(0x20) if chr(code) not in "\n\t"}
_VISIBLE[0x7F] = 0x2421
_VISIBLE |= {code: f"\\x{code:02x}" for code in range(0x80, 0xA0)}
# Bidirectional overrides and isolates can reorder what a terminal shows; shown as their code points.
_VISIBLE |= {code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def visible(text: str) -> str:
    """Text safe to print to a terminal: control characters as pictures, newlines and tabs kept."""
    return text.translate(_VISIBLE)


def one_line(text: str) -> str:
    """`visible`, on one line: for error messages and status bars."""
    return " ".join(visible(text).replace("\t", " ").splitlines())


def change_label(changes: Iterable[tuple[str, Any, Any]]) -> str:
    """Where live changes took effect, as the playground and review pages mark it: ⟨k=2 route=far⟩."""
    return "⟨" + " ".join(f"{name}={setting_text(new)}" for name, _, new in changes) + "⟩"


def switch_label(drafter: str) -> str:
    """Where the rounds' drafter changed without a live change (adaptive routing): ⟨→prose⟩."""
    return f"⟨→{drafter}⟩"


def setting_text(value: Any) -> str:
    """A setting's value as a user typed it: 0.5, not 0.500."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def token_repr(text: str, limit: int | None = None) -> str:
    """One token's text where it stands alone (drill-down, tapes, top candidates): between ‹ ›,
    which model output rarely holds, so ‹'› and ‹,› stay apart; a line break as ⏎, a token with no
    text (bytes of a character that the next token completes) as ‹∅›."""
    shown = visible(text).replace("\n", "⏎")
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return f"‹{shown or '∅'}›"


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless one: "1 round", "3 rounds"."""
    return f"{count:,} {noun}{'s' * (count != 1)}"
