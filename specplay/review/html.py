"""A review as one self-contained HTML page: inline style and script, nothing fetched, readable
with scripts off.

Everything from a session (prompt, token texts, names, values) is escaped, and control characters
are shown as pictures; the page's Content-Security-Policy lets no script run but its own (by hash)
and load nothing, so even a slip in escaping could not run a session's script.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Mapping, Sequence
from importlib.resources import files

from specplay.display.source_styles import SOURCE_WHY
from specplay.display.text import change_label, setting_text, switch_label, token_repr, visible
from specplay.display.themes import builtin_theme_files, read_theme
from specplay.engine.events import Candidate, draft_size
from specplay.engine.layout import depths
from specplay.review.build import Group, Review, Table
from specplay.review.charts import acceptance_chart, speed_chart
from specplay.review.columns import Column, Provenance
from specplay.review.summary import LEGEND, SUMMARY_HEADERS, metric_rows

DEFAULT_THEME = "specplay-dark"
_SERIES_FIELDS = ("primary", "accent", "success", "secondary", "warning", "error")


def e(value: object) -> str:
    """Text from a session as HTML: control characters as pictures, lone surrogates (bytes a
    tokenizer split mid-character) as U+FFFD, then escaped."""
    text = visible(str(value)).encode("utf-8", "replace").decode("utf-8")
    return html.escape(text, quote=True)


def _asset(name: str) -> str:
    return (files("specplay.review") / name).read_text(encoding="utf-8")


# --- themes ----------------------------------------------------------------------------------


def _theme_css() -> tuple[str, list[tuple[str, str, bool]]]:
    """CSS variables per shipped theme, and (name, label, is default) for the switch."""
    rules, names = [], []
    themes = [read_theme(path) for path in builtin_theme_files()]
    themes.sort(key=lambda t: t.get("name") != DEFAULT_THEME)
    for i, theme in enumerate(themes):
        name = str(theme["name"])
        values = {
            "background": theme.get("background", "#14171c"),
            "foreground": theme.get("foreground", "#d8dde3"),
            "surface": theme.get("surface", "#1c2027"),
            "panel": theme.get("panel", "#262b34"),
            **{str(k): v for k, v in theme.get("variables", {}).items()},
            **{f"series-{j}": theme.get(field, "#888888") for j, field in enumerate(_SERIES_FIELDS)},
        }
        body = " ".join(f"--{k}: {v};" for k, v in values.items())
        body += " --muted: color-mix(in srgb, var(--foreground) 60%, var(--background));"
        body += " --diverged: color-mix(in srgb, var(--spec-marker) 22%, transparent);"
        body += " --diverged-edge: var(--spec-marker);"
        selector = f"#theme-{name}:checked ~ .page" + (", .page" if i == 0 else "")
        rules.append(f"{selector} {{ {body} }}")
        names.append((name, name.removeprefix("specplay-"), i == 0))
    # The default's rule applies to .page as well; a checked radio's id selector outranks it.
    return "\n".join(rules), names


def _switch(group: str, label: str, names: Sequence[tuple[str, str, bool]]) -> tuple[str, str]:
    """A choice CSS alone can act on, scripts off: (the radios, placed before .page; their labels,
    placed anywhere inside it). `names`: (id suffix, label, checked)."""
    radios = "".join(
        f'<input type="radio" name="{group}" class="switches" id="{group}-{e(name)}"{" checked" if on else ""}>'
        for name, _, on in names
    )
    labels = "".join(f'<label for="{group}-{e(name)}">{e(text)}</label> ' for name, text, _ in names)
    return radios, f'<span class="switch">{label}: {labels}</span>'


def _switch_css(group: str, names: Sequence[str]) -> str:
    """The checked choice's label looks pressed."""
    return "\n".join(
        f"#{group}-{name}:checked ~ .page label[for='{group}-{name}'] {{ background: var(--panel); }}" for name in names
    )


# --- tokens ----------------------------------------------------------------------------------


def _quote(texts: Mapping[int, str], token_id: int) -> str:
    text = texts.get(token_id)
    return f"⟨{token_id}⟩" if text is None else token_repr(text)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _tops(label: str, top: Sequence[Candidate] | None, texts: Mapping[int, str]) -> list[str]:
    if not top:
        return []
    return [f"{label}: " + ", ".join(f"{_quote(texts, t)} {p:.3f}" for t, p in top)]


def token_details(column: Column, index: int, texts: Mapping[int, str]) -> str:
    """A token's details as plain lines: source, round, route, k, p_target, p_draft, u, d, θ, and
    the top candidates where the run recorded them (the playground's drill-down, as text)."""
    token = column.lane.tokens[index]
    lines = [
        f"{_quote({token.token_id: token.text}, token.token_id)}  {token.source} · token {index} · id {token.token_id}"
    ]
    lines.append(SOURCE_WHY.get(token.source, token.source))
    where: Provenance | None = column.provenance[index]
    if where is None:
        return "\n".join(lines)
    round = where.round
    lines.append(f"round {round.index} · route {round.drafter} · {draft_size(round)} · accepted {round.num_accepted}")
    position = where.position
    if position is None:
        lines.append(f"p_target(x) {_num(where.p_target)}")
        lines += _tops("top p_target", round.bonus_top_target, texts)
        return "\n".join(lines)
    if token.source == "corrected":
        lines.append(f"x = drafted {_quote(texts, position.token_id)}, rejected")
    ratio = position.p_target / position.p_draft if position.p_draft > 0 else float("inf")
    lines.append(f"p_target(x) {_num(position.p_target)} · p_draft(x) {_num(position.p_draft)}")
    lines.append(f"u {_num(position.uniform)} · min(1, p_target/p_draft) {_num(min(1.0, ratio))}")
    d = (
        _num(position.tv_distance)
        if position.tv_lower is None
        else f"in [{_num(position.tv_lower)}, {_num(position.tv_distance)}]"
    )
    lines.append(f"d = TV {d} · θ {_num(position.theta)} · outcome {position.outcome}")
    if position.accept_probability is not None:
        spent = f" · TV spent {_num(position.tv_spent)}" if position.tv_spent is not None else ""
        lines.append(f"the rule keeps x with probability {_num(position.accept_probability)}{spent}")
    if position.error_bound is not None:
        lines.append(f"approximate: within TV {_num(position.error_bound)} of the rule's distribution")
    lines += _tops("top p_target", position.top_target, texts)
    lines += _tops("top p_draft", position.top_draft, texts)
    return "\n".join(lines)


def _token(column: Column, index: int, texts: Mapping[int, str], first: int | None, cut: int = 0) -> str:
    """A token's span; `cut`: characters at its end shown at the start of the next row instead."""
    token = column.lane.tokens[index]
    classes = ["t", token.source]
    against = column.divergence
    if against is not None and index in against.changed:
        classes.append("dv")
    if index == first:
        classes.append("first")
    attrs = f' class="{" ".join(classes)}" data-i="{index}"'
    if column.kind == "speculative":
        attrs += f' tabindex="0" data-tip="{e(token_details(column, index, texts))}"'
        where = column.provenance[index]
        if where is not None and (p := where.p_target) is not None:
            attrs += f' data-p-target="{p:.6g}"'
    return f"<span{attrs}>{e(token.text[: len(token.text) - cut])}</span>"


def _indent_after(text: str) -> str:
    """What follows a token's last line break when it is blank: the next line's indentation. A row
    ends after a line break, so a token such as "\n    " puts it at the start of the next row."""
    _, newline, rest = text.rpartition("\n")
    return rest if newline and rest and not rest.strip() else ""


def _gap(column: Column, at: int, first: int | None) -> str:
    assert column.divergence is not None
    start, end = column.divergence.gaps[at]
    cls = "gap first" if at == first else "gap"
    return f'<span class="{cls}" data-at="{at}" title="the target-only text has {end - start} more tokens here"></span>'


def _change(column: Column, at: int) -> str:
    """The live changes that took effect from token `at`, marked inline as the playground does."""
    changes = [c for c in column.lane.changes if c.token_index == at]
    if not changes:
        return ""
    label = change_label(item for change in changes for item in change.changes)
    what = "; ".join(
        ", ".join(f"{name} {setting_text(old)} → {setting_text(new)}" for name, old, new in change.changes)
        for change in changes
    )
    return f'<span class="change" data-at="{at}" title="live change from token {at}: {e(what)}">{e(label)}</span>'


def _route_switch(column: Column, at: int) -> str:
    """A change of drafter from token `at` that no live change explains (adaptive routing)."""
    drafter = column.switches.get(at)
    if drafter is None:
        return ""
    title = f"from token {at} the rounds are drafted by {drafter}"
    return f'<span class="switch" data-at="{at}" title="{e(title)}">{e(switch_label(drafter))}</span>'


def _cell(column: Column, start: int, end: int, texts: Mapping[int, str], last: bool) -> str:
    against = column.divergence
    first = against.diff.first_divergence if against is not None else None
    tokens = column.lane.tokens
    # Code keeps its indentation: a row's leading blanks, carried by the line break ending the row
    # before, open this row (a token's text split at its last line break, both halves kept).
    carried = _indent_after(tokens[start - 1].text) if 0 < start <= len(tokens) else ""
    parts = [f'<span class="indent">{e(carried)}</span>'] if carried else []
    for index in range(start, end):
        parts.append(_change(column, index) or _route_switch(column, index))
        if against is not None and index in against.gaps:
            parts.append(_gap(column, index, first))
        cut = len(_indent_after(tokens[index].text)) if index == end - 1 and not last else 0
        parts.append(_token(column, index, texts, first, cut))
    if last:
        parts.append(_change(column, end))
        if against is not None and end in against.gaps:
            parts.append(_gap(column, end, first))
    return f'<div class="cell" data-col="{e(column.key)}" dir="auto">{"".join(parts)}</div>'


def _grid(review: Review, group: Group) -> str:
    """The texts, one column per lane, in document order column by column (so a column's text is
    one piece to read, select and copy). Aligned, each column's cells are rows of a subgrid lined
    up with the reference's rows; as prose, the cells flow inline as one text."""
    columns = group.columns
    rows = max((len(c.starts) for c in columns), default=0)
    out = []
    for c in columns:
        own = " · ".join(f"{name} {value}" for name, value in review.column_settings.get(c.key, []))
        extra = f'<span class="own">{e(own)}</span>' if own else ""
        parts = [f'<div class="head" data-col="{e(c.key)}">{e(c.title)}{extra}</div>']
        for r in range(rows):
            start = c.starts[r] if r < len(c.starts) else len(c.lane.tokens)
            end = c.starts[r + 1] if r + 1 < len(c.starts) else len(c.lane.tokens)
            parts.append(_cell(c, start, end, c.texts, last=r == rows - 1))
        cls = "col reference" if c.kind == "target" and c.divergence is None else "col"
        out.append(f'<div class="{cls}" data-col="{e(c.key)}">{"".join(parts)}</div>')
    style = f"grid-template-columns: repeat({len(columns)}, minmax(14rem, 1fr)); "
    style += f"grid-template-rows: repeat({rows + 1}, auto)"
    return f'<div class="scroll"><div class="grid" style="{style}">{"".join(out)}</div></div>'


# --- the rest of the page ----------------------------------------------------------------------


def _prompt(text: str) -> str:
    # HTML drops a line break just after <pre>: a prompt that opens with one gets one more to lose.
    return f'<pre class="prompt">{chr(10) if text.startswith(chr(10)) else ""}{e(text)}</pre>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int = 1, cls: str = "") -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{e(cell)}</td>' if i >= numeric_from else f"<td>{e(cell)}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><tr>{head}</tr>{body}</table>'


def _extra_table(table: Table, heading: str = "h3") -> str:
    caption = f'<p class="notes">{e(table.caption)}</p>' if table.caption else ""
    return f"<{heading}>{e(table.title)}</{heading}>{_table(table.headers, table.rows)}{caption}"


def _legend() -> str:
    items = "".join(f'<span class="legend-item"><span class="t {s}">{s}</span>: {e(m)}</span>' for s, m in LEGEND)
    marks = (
        '<span class="legend-item"><span class="t dv">marked</span>: differs from the target-only text</span>'
        '<span class="legend-item"><span class="gap"></span>: the target-only text has more here</span>'
        '<span class="legend-item"><span class="change">⟨k=2⟩</span>: a live change took effect here</span>'
    )
    return f"<span>{items}{marks}</span>"


def _tape(column: Column) -> str:
    texts = column.texts
    rows = []
    for event in column.lane.rounds:
        drafts = []
        levels = depths(event.parents)
        for node, position in enumerate(event.positions):
            if levels.count(levels[node]) > 1 and (node == 0 or levels[node] != levels[node - 1]):
                drafts.append(f'<span class="level">depth {levels[node]}:</span>')  # a level of alternatives
            drafts.append(f'<span class="d {position.outcome}">{e(_quote(texts, position.token_id))}</span>')
        committed = "".join(f'<span class="t {t.source}">{e(t.text)}</span>' for t in event.tokens)
        rows.append(
            f'<tr><td class="num">{event.index}</td><td>{e(event.drafter)}</td><td class="num">{draft_size(event)}</td>'
            f'<td class="drafts">{"".join(drafts) or "nothing drafted"}</td>'
            f'<td class="num">{event.num_accepted}</td><td class="drafts">{committed}</td></tr>'
        )
    head = "<tr><th>round</th><th>route</th><th>draft</th><th>drafted (rejected struck)</th><th>accepted</th>"
    head += "<th>committed</th></tr>"
    return (
        f'<details class="tape" data-col="{e(column.key)}"><summary>Draft tape of {e(column.title)}: '
        f"{len(column.lane.rounds)} rounds</summary><table>{head}{''.join(rows)}</table></details>"
    )


def _group(review: Review, group: Group, view_switch: str, summary: bool) -> str:
    out = []
    if group.title:
        out.append(f"<h2>{e(group.title)}</h2>")
    if group.prompt is not None:  # a conversation's turn: what the user asked, then the answers
        out.append(_prompt(group.prompt))
    out += [_extra_table(t) for t in group.tables]
    if summary:
        out.append(_table(SUMMARY_HEADERS, group.summary_rows(), cls="summary"))
    out.append(f'<h3>Texts</h3><div class="bar">{_legend()}{view_switch}</div>')
    out.append(_grid(review, group))
    charts = [c for c in (acceptance_chart(group.columns), speed_chart(group.columns)) if c]
    if any(not c.wall_time_is_speed for c in group.columns):
        out.append(
            '<p class="notes">tokens/s through vLLM inspection is not shown: it would time HTTP round trips.</p>'
        )
    if charts:
        out.append(f'<div class="charts">{"".join(charts)}</div>')
    for column in group.columns:
        if column.lane.rounds:
            out.append(_tape(column))
        for line in review.changes.get(column.key, []):
            out.append(f"<p>Control change in {e(column.title)}: {e(line)}</p>")
    lanes = [c.lane for c in group.columns]
    out.append(
        "<details><summary>Every metric</summary>"
        + _table(["metric", *(c.title for c in group.columns)], [[n, *v] for n, v in metric_rows(lanes)])
        + "</details>"
    )
    return "\n".join(out)


def to_html(review: Review) -> str:
    theme_css, names = _theme_css()
    theme_radios, theme_switch = _switch("theme", "Theme", names)
    prose = review.prose_first
    view_radios, view_switch = _switch(
        "view", "Texts as", [("prose", "prose", prose), ("aligned", "aligned rows", not prose)]
    )
    switch_css = _switch_css("theme", [name for name, _, _ in names]) + "\n" + _switch_css("view", ["prose", "aligned"])
    script = _asset("page.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    policy = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    body = [f"<h1>{e(review.title)}</h1>", '<div class="notes">']
    body += [f'<p class="incomplete">{e(warning)}</p>' for warning in review.warnings]
    body += [f"<p>{e(note)}</p>" for note in review.notes]
    body.append("</div>")
    if not review.conversation:  # a conversation shows each turn's prompt with its answers
        body += ["<h2>Prompt</h2>", _prompt(review.prompt)]
    if len(review.groups) == 1:
        body.append("<h2>Summary</h2>")
        body.append(_table(SUMMARY_HEADERS, review.groups[0].summary_rows(), cls="summary"))
    # A sweep's numbers (fidelity pages), or the whole conversation's before its turns.
    body += [_extra_table(t, "h2" if review.conversation else "h3") for t in review.tables]
    body.append(f'<div class="bar">{theme_switch}</div>')
    # One group's summary comes first on the page; a sweep's seeds each have their own. The texts
    # follow it, so a reader meets them on the first screen; what ran them comes after.
    body += [_group(review, group, view_switch, summary=len(review.groups) > 1) for group in review.groups]
    models = "".join(f"<tr><td>{e(n)}</td><td>{e(s)}</td><td>{e(d)}</td></tr>" for n, s, d in review.models)
    body += [
        "<h2>Models and settings</h2>",
        f"<table><tr><th>model</th><th>source</th><th>weights</th></tr>{models}</table>",
    ]
    settings = " · ".join(f"<code>{e(name)}</code> {e(value)}" for name, value in review.settings)
    body.append(f'<p class="settings">{settings}</p>')
    body.append('<div id="pinned" hidden><pre></pre><small>Esc to close</small></div>')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{e(review.title)}</title>\n<style>\n{_asset('page.css')}\n{theme_css}\n{switch_css}\n</style>\n"
        f'</head>\n<body>\n{theme_radios}{view_radios}\n<div class="page">\n'
        + "\n".join(body)
        + f"\n</div>\n<script>{script}</script>\n</body>\n</html>\n"
    )
