"""A review as a Markdown transcript, in the page's order: summary, then the texts with every
difference from the target-only text marked, then the details.

Everything read from a session is escaped, so a transcript cannot inject markup into whatever
shows it.
"""

from __future__ import annotations

import re
from typing import Any

from specplay.display.text import change_label, switch_label, visible
from specplay.review.build import Group, Review, Table
from specplay.review.columns import Column
from specplay.review.summary import SUMMARY_HEADERS, metric_rows

# Escaping every character with a meaning somewhere in CommonMark or GFM (a backslash may escape
# any ASCII punctuation) is simpler and safer than tracking where each one would matter.
_MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~&=$")
_MD_INLINE_SPECIAL = set("\\`*_[]<>!|~&$#")
# Raw HTML tags rather than ** and _: emphasis delimiters stop working next to whitespace and
# punctuation, which model output is full of. GitHub keeps <b>, <i>, <ins> and <mark>.
_MD_TAGS = {"corrected": "b", "bonus": "i", "relaxed": "ins"}
_MD_LEGEND = (
    "accepted plain · <b>corrected</b> bold · <i>bonus</i> italic · <ins>relaxed</ins> underlined · "
    "<mark>marked</mark>: differs from the target-only text (<mark>⁁</mark>: the target-only text has more there) · "
    "<kbd>⟨k=2⟩</kbd>: a live change took effect there"
)


def md_escape(text: str, line_start: bool = False) -> tuple[str, bool]:
    """`text` as literal Markdown inline content; newlines become hard breaks and leading spaces are kept.

    Returns the escaped text and whether it ends at the start of a line, to carry to the next piece.
    """
    out = []
    for char in text:
        if char == "\r":  # CRLF output reads as LF; a lone CR has no place in a document
            continue
        if char == "\n":
            out.append("\\\n")
            line_start = True
        elif char in " \t" and line_start:  # a paragraph line's leading blanks would be dropped
            out.append("&nbsp;" * (4 if char == "\t" else 1))
        else:
            out.append("\\" + char if char in _MD_SPECIAL else char)
            line_start = False
    return "".join(out), line_start


def md_inline(text: str) -> str:
    """A value (a name, a path, a number) as literal Markdown where only inline syntax applies.

    For table cells and text after a heading marker or a word of ours: there no block syntax
    (lists, headings, code blocks) can start, so the escaping stays light and the source readable.
    """
    return "".join("\\" + char if char in _MD_INLINE_SPECIAL else char for char in " ".join(text.splitlines()))


def md_code_cell(text: str) -> str:
    """`text` as a code span in a table cell: fenced by more backticks than it holds, pipes escaped."""
    text = " ".join(text.splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def md_fence(text: str) -> str:
    """`text` verbatim in a fenced code block, the fence longer than any backtick run inside."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}"


def md_column_text(column: Column) -> str:
    """The column's text, sources as tags, each run of differences from the target-only text in
    one <mark>."""
    against = column.divergence
    changed = against.changed if against is not None else frozenset()
    gaps = against.gaps if against is not None else {}
    changes: dict[int, list[tuple[str, Any, Any]]] = {}
    for change in column.lane.changes:
        changes.setdefault(change.token_index, []).extend(change.changes)
    parts, line_start, marking = [], True, False
    for index, token in enumerate([*column.lane.tokens, None]):
        if marking and index not in changed:
            parts.append("</mark>")
            marking = False
        if index in changes:
            parts.append(f"<kbd>{md_inline(change_label(changes[index]))}</kbd>")
        elif index in column.switches:
            parts.append(f"<kbd>{md_inline(switch_label(column.switches[index]))}</kbd>")
        if index in gaps:
            parts.append("<mark>⁁</mark>")
        if token is None or not token.text:
            continue
        if index in changed and not marking:
            parts.append("<mark>")
            marking = True
        escaped, line_start = md_escape(token.text, line_start)
        tag = _MD_TAGS.get(token.source)
        parts.append(f"<{tag}>{escaped}</{tag}>" if tag else escaped)
    body = "".join(parts)
    # A hard break cannot end a paragraph: its backslash would show.
    while body.endswith("\\\n"):
        body = body[:-2]
    return body or "_(no tokens)_"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] * len(header)) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _table_section(table: Table, level: str) -> list[str]:
    """A table the review adds (the whole conversation's numbers, a sweep's over its seeds)."""
    out = [f"{level} {md_inline(table.title)}", ""]
    out += _md_table([md_inline(h) for h in table.headers], [[md_inline(c) for c in row] for row in table.rows])
    return out + (["", md_inline(table.caption)] if table.caption else []) + [""]


def _summary(group: Group) -> list[str]:
    return _md_table(list(SUMMARY_HEADERS), [[md_inline(cell) for cell in row] for row in group.summary_rows()])


def _texts(review: Review, group: Group) -> list[str]:
    out = [f"Sources: {_MD_LEGEND}.", ""]
    for column in group.columns:
        own = " · ".join(f"{name} {value}" for name, value in review.column_settings.get(column.key, []))
        out += [f"### {md_inline(column.title)}", ""]
        if own:
            out += [md_inline(own), ""]
        if column.divergence is not None:
            at = column.divergence.diff.first_divergence
            out += [("Same tokens as the target-only text." if at is None else f"First divergence at token {at}."), ""]
        out += [md_column_text(column), ""]
        for line in review.changes.get(column.key, []):
            out += [f"- control change: {md_inline(line)}"]
        if review.changes.get(column.key):
            out.append("")
    return out


def to_markdown(review: Review) -> str:
    out = [f"# {md_inline(review.title)}", ""]
    for warning in review.warnings:
        out += [f"**{md_inline(warning)}**", ""]
    for note in review.notes:
        out += [md_inline(note), ""]
    if not review.conversation:  # a conversation shows each turn's prompt with its answers
        out += ["## Prompt", "", md_fence(review.prompt), ""]
    single = len(review.groups) == 1
    if single:
        out += ["## Summary", "", *_summary(review.groups[0]), ""]
    for table in review.tables:
        out += _table_section(table, "##")
    out += ["## Models and settings", ""]
    out += _md_table(["model", "source", "weights"], [[md_inline(c) for c in row] for row in review.models])
    out += [""]
    out += _md_table(["setting", "value"], [[md_code_cell(k), md_inline(v)] for k, v in review.settings])
    for group in review.groups:
        out += ["", f"## {md_inline(group.title) if group.title else 'Texts'}", ""]
        if group.prompt is not None:
            out += [md_fence(group.prompt), ""]
        for table in group.tables:
            out += _table_section(table, "###")
        if not single:
            out += [*_summary(group), ""]
        out += _texts(review, group)
        lanes = [c.lane for c in group.columns]
        out += ["### Metrics", ""]
        header = ["metric"] + [md_inline(c.title) for c in group.columns]
        out += _md_table(header, [[md_code_cell(n)] + [md_inline(v) for v in vs] for n, vs in metric_rows(lanes)])
    return visible("\n".join(out) + "\n")  # a transcript is read in terminals and editors too
