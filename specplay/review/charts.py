"""Inline SVG charts for a review page: acceptance by draft position, and tokens/s over the run.

Hand-written SVG (a few rectangles and polylines) keeps the page self-contained and readable with
scripts off; colours come from CSS variables, so the page's theme switch recolours them.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from specplay.review.columns import Column, step_times_ms

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 24, 36
SERIES = 6
"""Series colours the stylesheet defines (--series-0 ... --series-5), reused in turn."""
SPEED_WINDOW_TOKENS = 16
"""tokens/s at a point is taken over the last this many tokens: one round alone is too noisy."""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _frame(title: str, body: list[str], legend: Sequence[tuple[int, str]], y_label: str, x_label: str) -> str:
    keys = "".join(f'<tspan class="series-{i % SERIES}">■</tspan><tspan> {_e(name)}  </tspan>' for i, name in legend)
    return (
        f'<figure class="chart"><figcaption>{_e(title)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT + 18}" width="{WIDTH}" height="{HEIGHT + 18}" role="img" '
        f'aria-label="{_e(title)}">'
        + "".join(body)
        + f'<text x="{LEFT}" y="{HEIGHT - 6}" class="axis-label">{_e(x_label)}</text>'
        + f'<text x="{LEFT}" y="{TOP - 10}" class="axis-label">{_e(y_label)}</text>'
        + f'<text x="{LEFT}" y="{HEIGHT + 14}" class="legend">{keys}</text>'
        + "</svg></figure>"
    )


def _y_axis(top_value: float, fmt: str) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    out = [f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" class="axis"/>']
    out.append(f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="axis"/>')
    for i in range(5):
        value = top_value * i / 4
        y = HEIGHT - BOTTOM - plot_h * i / 4
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">{format(value, fmt)}</text>')
    return out


def acceptance_chart(columns: Sequence[Column]) -> str | None:
    """Bars per draft position, one per speculative column: accepted over drafted there."""
    series = [
        (i, c.title, list(c.lane.metrics.get("acceptance_per_position") or []))
        for i, c in enumerate(c for c in columns if c.kind == "speculative")
    ]
    series = [s for s in series if s[2]]
    if not series:
        return None
    positions = max(len(values) for _, _, values in series)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / positions
    bar = slot * 0.8 / len(series)
    body = _y_axis(1.0, ".2f")
    for position in range(positions):
        x0 = LEFT + slot * position + slot * 0.1
        label_x = LEFT + slot * (position + 0.5)
        label_y = HEIGHT - BOTTOM + 14
        body.append(f'<text x="{label_x:.1f}" y="{label_y}" class="tick" text-anchor="middle">{position + 1}</text>')
        for j, (i, name, values) in enumerate(series):
            if position >= len(values):
                continue
            h = plot_h * values[position]
            x = x0 + bar * j
            body.append(
                f'<rect x="{x:.1f}" y="{HEIGHT - BOTTOM - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'class="series-{i % SERIES}"><title>{_e(name)}, position {position + 1}: '
                f"{values[position]:.3f}</title></rect>"
            )
    legend = [(i, name) for i, name, _ in series]
    return _frame("Acceptance by draft position", body, legend, "accepted / drafted", "draft position")


def speed_points(column: Column) -> list[tuple[int, float]]:
    """(tokens so far, tokens/s over the last SPEED_WINDOW_TOKENS tokens) after each round or step."""
    times = [(0, 0.0), *step_times_ms(column.lane)]
    out = []
    start = 0
    for end in range(1, len(times)):
        while times[end][0] - times[start + 1][0] >= SPEED_WINDOW_TOKENS:
            start += 1
        tokens, elapsed_ms = times[end][0] - times[start][0], times[end][1] - times[start][1]
        if elapsed_ms > 0:
            out.append((times[end][0], 1000 * tokens / elapsed_ms))
    return out


def speed_chart(columns: Sequence[Column]) -> str | None:
    """tokens/s over the run, one line per column whose wall time was a speed."""
    series = [(i, c.title, speed_points(c)) for i, c in enumerate(columns) if c.wall_time_is_speed]
    series = [s for s in series if s[2]]
    if not series:
        return None
    max_tokens = max(points[-1][0] for _, _, points in series)
    max_speed = max(speed for _, _, points in series for _, speed in points) * 1.1
    if max_tokens <= 0 or max_speed <= 0:  # rounds that committed nothing: no axis has a scale
        return None
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    body = _y_axis(max_speed, ".0f")
    for i in range(5):
        tokens = round(max_tokens * i / 4)
        x = LEFT + plot_w * tokens / max_tokens
        body.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" class="tick" text-anchor="middle">{tokens}</text>')
    for i, name, points in series:
        coords = " ".join(
            f"{LEFT + plot_w * tokens / max_tokens:.1f},{HEIGHT - BOTTOM - plot_h * speed / max_speed:.1f}"
            for tokens, speed in points
        )
        body.append(
            f'<polyline points="{coords}" class="line series-{i % SERIES}"><title>{_e(name)}</title></polyline>'
        )
    legend = [(i, name) for i, name, _ in series]
    caption = f"tokens/s over the last {SPEED_WINDOW_TOKENS} tokens"
    return _frame("Tokens/s over the run", body, legend, caption, "tokens generated")
