"""A session as a shareable document: a Markdown transcript, a self-contained HTML page, or its raw log.

Everything read from a session (prompt, token texts, model sources, lane names, setting values)
is escaped for the target format, so a transcript cannot inject markup into whatever shows it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from rich.style import Style
from rich.terminal_theme import SVG_EXPORT_THEME

# One palette for the terminal and the page.
from specplay.display.palette import SOURCE_STYLES
from specplay.display.text import visible
from specplay.store.format import LaneRecord, Session
from specplay.store.writer import record_line

FORMATS = ("md", "html", "jsonl")

METRICS = (
    "num_tokens",
    "tokens_per_s",
    "time_to_first_token_ms",
    "num_spec_steps",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_per_position",
    "num_tokens_by_source",
    "tv_spent",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
)
"""vLLM-named metrics in the order a reader wants them; any others a session holds follow."""

LEGEND = (
    ("accepted", "a draft token the verifier kept"),
    ("corrected", "drawn from the residual after a rejection"),
    ("bonus", "the target's own token after a fully accepted round"),
    ("budget", "kept only because of the TV budget"),
)


def export_session(session: Session, fmt: str) -> str:
    if fmt == "md":
        return to_markdown(session)
    if fmt == "html":
        return to_html(session)
    if fmt == "jsonl":
        return to_jsonl(session)
    raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")


def to_jsonl(session: Session) -> str:
    """The raw event log, one record per line, header first."""
    return "".join(record_line(record) + "\n" for record in session.records)


# --- facts shared by both documents, as plain unescaped strings -----------------------------


@dataclass(frozen=True)
class Facts:
    title: str
    origin: str
    """When, by which specplay, on which backend and device."""
    complete: bool
    models: list[tuple[str, str, str]]
    """(name, source, short weights hash)."""
    settings: list[tuple[str, str]]
    metric_rows: list[tuple[str, list[str]]]
    """(metric, value per lane)."""
    speedup: str | None


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt_value(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt_value(v) for v in value) + "]"
    return str(value)


def fmt_setting(value: Any) -> str:
    """A setting as typed: 0.5, not 0.500."""
    return f"{value:g}" if isinstance(value, float) else fmt_value(value)


def _models(session: Session) -> list[tuple[str, str, str]]:
    out = []
    for name, identity in (session.header.get("backend", {}).get("models") or {}).items():
        digest = str(identity.get("weights_sha256", ""))[:12] or "-"
        if identity.get("weights_hash") == "sampled":
            digest += " (sampled)"
        out.append((str(name), str(identity.get("source", "?")), digest))
    return out


def _flatten(settings: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    # Sampling and policy fields are flattened, as live control changes name them.
    for name, value in settings.items():
        if isinstance(value, dict) and name in ("sampling", "policy_params"):
            yield from value.items()
        else:
            yield name, value


def _settings(session: Session) -> list[tuple[str, str]]:
    request = session.header.get("request") or {}
    lanes = session.header.get("lanes") or []
    start = session.lanes[lanes[0]].start if lanes and lanes[0] in session.lanes else None
    rows = [(str(k), fmt_setting(v)) for k, v in request.items()]
    if start is None:
        return rows
    if start.route is not None:
        rows.append(("drafter", str(start.route)))
    rows += [(str(k), fmt_setting(v)) for k, v in _flatten(asdict(start.settings))]
    return rows


def _metric_rows(session: Session) -> list[tuple[str, list[str]]]:
    lanes = list(session.lanes.values())
    names = list(METRICS)
    for lane in lanes:
        names += [name for name in lane.metrics if name not in names]
    rows = [(name, [fmt_value(lane.metrics.get(name)) for lane in lanes]) for name in names]
    rows.append(("finish_reason", [fmt_value(lane.done.finish_reason if lane.done else None) for lane in lanes]))
    return rows


def _speedup(session: Session) -> str | None:
    baseline = session.baseline
    if baseline is None:
        return None
    if not session.capabilities.wall_time_is_speed:
        return "speedup vs target-only: not measured (the run's wall time was HTTP round trips)"
    speedup = session.measured_speedup
    if speedup is None:
        return None
    tokens_per_s, target_tokens_per_s = session.main.metrics["tokens_per_s"], baseline.metrics["tokens_per_s"]
    return f"speedup vs target-only: {speedup:.2f}x ({tokens_per_s:.1f} vs {target_tokens_per_s:.1f} tokens_per_s)"


def _where(backend: dict[str, Any]) -> str:
    if "device" in backend:
        return f"on {backend['device']}"
    return f"({backend['mode']} mode)" if "mode" in backend else "on ?"


def _origin(header: dict[str, Any]) -> str:
    backend = header.get("backend") or {}
    return (
        f"Created {header.get('created', '?')} by specplay {header.get('specplay_version', '?')}, "
        f"backend {backend.get('backend', '?')} {_where(backend)}."
    )


def facts(session: Session) -> Facts:
    return Facts(
        title=f"specplay session {session.id}",
        origin=_origin(session.header),
        complete=session.complete,
        models=_models(session),
        settings=_settings(session),
        metric_rows=_metric_rows(session),
        speedup=_speedup(session),
    )


def change_lines(lane: LaneRecord) -> list[str]:
    """One line per live control change: at which token, and what changed."""
    lines = []
    for change in lane.changes:
        what = ", ".join(f"{name} {fmt_setting(old)} → {fmt_setting(new)}" for name, old, new in change.changes)
        lines.append(f"token {change.token_index}: {what}")
    return lines


def lane_title(session: Session, lane: LaneRecord) -> str:
    title = lane.name + (" (target-only baseline)" if lane is session.baseline else "")
    return title + ("" if lane.complete else " (incomplete)")


INCOMPLETE = "Incomplete session: the run was cut short; lanes show the tokens they had produced."


# --- Markdown ------------------------------------------------------------------------------

# Escaping every character with a meaning somewhere in CommonMark or GFM (a backslash may escape
# any ASCII punctuation) is simpler and safer than tracking where each one would matter.
_MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~&=$")
_MD_INLINE_SPECIAL = set("\\`*_[]<>!|~&$#")
# Raw HTML tags rather than ** and _: emphasis delimiters stop working next to whitespace and
# punctuation, which model output is full of. GitHub keeps <b>, <i> and <ins>.
_MD_TAGS = {"corrected": "b", "bonus": "i", "budget": "ins"}
_MD_LEGEND = "accepted plain · <b>corrected</b> bold · <i>bonus</i> italic · <ins>budget</ins> underlined"


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


def md_lane_text(lane: LaneRecord) -> str:
    parts, line_start = [], True
    for text, source in zip(lane.texts, lane.sources, strict=True):
        if not text:
            continue
        escaped, line_start = md_escape(text, line_start)
        tag = _MD_TAGS.get(source)
        parts.append(f"<{tag}>{escaped}</{tag}>" if tag else escaped)
    body = "".join(parts)
    # A hard break cannot end a paragraph: its backslash would show.
    while body.endswith("\\\n"):
        body = body[:-2]
    return body or "_(no tokens)_"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] * len(header)) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def to_markdown(session: Session) -> str:
    f = facts(session)
    out = [f"# {md_inline(f.title)}", ""]
    if not f.complete:
        out += [f"**{INCOMPLETE}**", ""]
    out += [md_inline(f.origin), "", "## Prompt", "", md_fence(session.prompt), "", "## Models", ""]
    out += _md_table(["model", "source", "weights"], [[md_inline(cell) for cell in row] for row in f.models])
    out += ["", "## Settings", ""]
    out += _md_table(["setting", "value"], [[md_code_cell(k), md_inline(v)] for k, v in f.settings])
    out += ["", "## Lanes", "", f"Sources: {_MD_LEGEND}.", ""]
    for lane in session.lanes.values():
        out += [f"### {md_inline(lane_title(session, lane))}", "", md_lane_text(lane), ""]
        if lane.changes:
            out += ["Control changes:", ""] + [f"- {md_inline(line)}" for line in change_lines(lane)] + [""]
    out += ["## Metrics", ""]
    header = ["metric"] + [md_inline(name) for name in session.lanes]
    out += _md_table(header, [[md_code_cell(name)] + [md_inline(v) for v in values] for name, values in f.metric_rows])
    if f.speedup:
        out += ["", md_inline(f.speedup)]
    return visible("\n".join(out) + "\n")  # a transcript is read in terminals and editors too


# --- HTML ----------------------------------------------------------------------------------


def _css_rule(source: str, style: str) -> str:
    parsed = Style.parse(style)
    rules = []
    if parsed.color is not None:
        rules.append(f"color: {parsed.color.get_truecolor(SVG_EXPORT_THEME).hex}")
    if parsed.bold:
        rules.append("font-weight: bold")
    return f".{source} {{ {'; '.join(rules)} }}"


def _css() -> str:
    theme = SVG_EXPORT_THEME
    page = (
        f"body {{ background: {theme.background_color.hex}; color: {theme.foreground_color.hex}; "
        "font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }\n"
        "pre, .tokens { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap; "
        "overflow-wrap: anywhere; }\n"
        ".tokens { border-left: 3px solid #555; padding-left: 1rem; }\n"
        "table { border-collapse: collapse; }\n"
        "th, td { border: 1px solid #555; padding: 0.2rem 0.6rem; text-align: left; }\n"
        ".incomplete { color: #cc555a; font-weight: bold; }\n"
    )
    return page + "\n".join(_css_rule(source, style) for source, style in SOURCE_STYLES.items() if style)


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def html_lane_text(lane: LaneRecord) -> str:
    spans = []
    for token_id, text, source in zip(lane.token_ids, lane.texts, lane.sources, strict=True):
        if text:
            spans.append(f'<span class="{e(source)}" title="{e(source)}, id {e(token_id)}">{e(text)}</span>')
    return "".join(spans)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{e(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _html_legend() -> str:
    items = (f'<span class="{source}">{source}</span>: {e(meaning)}' for source, meaning in LEGEND)
    return "<p>Sources: " + " · ".join(items) + ".</p>"


def to_html(session: Session) -> str:
    f = facts(session)
    body = [f"<h1>{e(f.title)}</h1>"]
    if not f.complete:
        body.append(f'<p class="incomplete">{e(INCOMPLETE)}</p>')
    body += [f"<p>{e(f.origin)}</p>", "<h2>Prompt</h2>", f"<pre>{e(session.prompt)}</pre>"]
    models = "".join(f"<li>{e(name)}: {e(source)} (weights {e(digest)})</li>" for name, source, digest in f.models)
    body += ["<h2>Models</h2>", f"<ul>{models}</ul>", "<h2>Settings</h2>"]
    body.append(_html_table(["setting", "value"], [[k, v] for k, v in f.settings]))
    body += ["<h2>Lanes</h2>", _html_legend()]
    for lane in session.lanes.values():
        body += [f"<h3>{e(lane_title(session, lane))}</h3>", f'<div class="tokens">{html_lane_text(lane)}</div>']
        if lane.changes:
            items = "".join(f"<li>{e(line)}</li>" for line in change_lines(lane))
            body.append(f"<p>Control changes:</p><ul>{items}</ul>")
    body.append("<h2>Metrics</h2>")
    body.append(_html_table(["metric", *session.lanes], [[name, *values] for name, values in f.metric_rows]))
    if f.speedup:
        body.append(f"<p>{e(f.speedup)}</p>")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{e(f.title)}</title>\n<style>\n{_css()}\n</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
