"""Lines made of phrases, wrapped only between phrases: a number stays with what it counts
("k 2.6", "first token 0.12 s") whatever the width of the widget that shows them.

A phrase carries its own leading separator ("  40 tokens", " k 2.6,"): joined, the phrases read
as the line; at a break the separator goes and the phrase starts the next line. Pure text, so
the stats are composed and tested without a screen; `wrap_styled` wraps styled phrases (the
drill-down's) by the same rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from textual.content import Content

Line = tuple[str, ...]

# A number (or its placeholder "–"), and a sign or arrow, stays with the word before it: prose
# keeps "costs 0.60" and "k 8 → 1.05×" whole.
_GLUED = re.compile(r"[\d–≤≈×]|[+=→]$")
# A call's arguments stay with it: "min(1, p_target/p_draft)" is one formula (a "(" that opens a
# word, as in "(per-token acceptance", may break).
_CALL_OPEN = re.compile(r"\w\(")


def _in_call(word: str) -> bool:
    return bool(_CALL_OPEN.search(word)) and word.count("(") > word.count(")")


def phrases(*parts: str, sep: str = "  ") -> Line:
    """A line of `parts`, each after the first led by `sep` (empty parts left out)."""
    kept = [part for part in parts if part]
    return tuple(part if i == 0 else sep + part for i, part in enumerate(kept))


def prose(text: str) -> Line:
    """A sentence as a line of words, a number kept with the word before it, a call with its arguments."""
    line: list[str] = []
    for word in text.split(" "):
        if line and (_GLUED.match(word) or _in_call(line[-1])):
            line[-1] += " " + word
        else:
            line.append(word if not line else " " + word)
    return tuple(line)


@dataclass(frozen=True)
class Phrased:
    """Lines of phrases, shown wrapped between phrases (`wrap`)."""

    lines: tuple[Line, ...] = ()

    def __str__(self) -> str:
        return "\n".join("".join(line) for line in self.lines)

    def __add__(self, other: Phrased) -> Phrased:
        return Phrased(self.lines + other.lines)

    def prefixed(self, text: str) -> Phrased:
        """`text` before the first phrase, part of it."""
        if not self.lines or not self.lines[0]:
            return Phrased(((text.rstrip(),), *self.lines[1:]))
        first = self.lines[0]
        return Phrased(((text + first[0], *first[1:]), *self.lines[1:]))

    def wrap(self, width: int) -> list[str]:
        """The lines as they fit `width` cells, broken only between phrases; a phrase wider than
        `width` broken between its words as prose is. `width` < 1: the lines unbroken."""
        if width < 1:
            return str(self).split("\n")
        return [wrapped for line in self.lines for wrapped in _pack(line, width)]


def lines_of(*lines: Line | Iterable[str]) -> Phrased:
    return Phrased(tuple(tuple(line) for line in lines))


def wrap_styled(line: Sequence[Content], width: int) -> list[Content]:
    """A line of styled phrases as it fits `width` cells: broken where `Phrased.wrap` breaks
    their text, each row keeping its styles."""
    whole = Content.assemble(*line)
    rows: list[Content] = []
    at = 0
    for text in lines_of(tuple(part.plain for part in line)).wrap(width):
        start = whole.plain.index(text, at)  # past the separator a break dropped
        rows.append(whole[start : start + len(text)])
        at = start + len(text)
    return rows


def _pack(line: Line, width: int) -> list[str]:
    out: list[str] = []
    current = ""
    for phrase in line:
        if current and cell_len((current + phrase).rstrip(" ")) <= width:  # trailing blanks may run over
            current += phrase
            continue
        if current:  # a break: the phrase's separator goes (a line's own indent stays)
            out.append(current)
            phrase = phrase.lstrip(" ")
        if cell_len(phrase) > width and len(words := prose(phrase)) > 1:
            *whole, current = _pack(words, width)
            out += whole
        else:
            current = phrase
    out.append(current)
    return out
