"""Colours as a Textual SVG screenshot draws them: each text run's fill against the background
under it, and WCAG's contrast ratio between two colours."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

_CLASS = re.compile(r"\.(terminal-(?:\d+-)?r\d+) \{ fill: (#[0-9a-f]{6})")
_RECT = re.compile(r'<rect fill="(#[0-9a-f]{6})" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"')
_TEXT = re.compile(r'<text class="([^"]+)" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>')


@dataclass(frozen=True)
class Run:
    text: str
    colour: str
    background: str


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2's contrast ratio, 1 to 21."""
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def text_runs(svg: str) -> list[Run]:
    """Every text run of the screenshot with its colour and the background it is drawn on."""
    fills = dict(_CLASS.findall(svg))
    rects = [(fill, *map(float, box)) for fill, *box in _RECT.findall(svg)]
    runs = []
    for cls, x, y, text in _TEXT.findall(svg):
        tx, ty = float(x), float(y)
        under = [f for f, rx, ry, w, h in rects if rx <= tx < rx + w and ry <= ty <= ry + h]
        if cls in fills and under:
            runs.append(Run(html.unescape(text).replace("\xa0", " "), fills[cls], under[-1]))
    return runs
