"""Screenshots of the playground: Textual's SVG, plus a PNG where rsvg-convert is installed.

Textual saves into the user's downloads folder, which a server or a fresh account may not have;
specplay keeps screenshots beside the sessions, in one folder it names when it saves.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from datetime import datetime
from pathlib import Path

from specplay.errors import SpecplayError
from specplay.files.outputs import free_path, write_output

CONVERT_TIMEOUT_S = 60
_LEADING_SPACES = re.compile(
    r'(<text [^>]*?x=")([\d.]+)("[^>]*?textLength=")([\d.]+)("[^>]*>)((?:&#160;)+)([^<]*</text>)'
)


def screenshots_dir(sessions_dir: Path) -> Path:
    return sessions_dir / "screenshots"


_NAMING = threading.Lock()
"""Held from choosing a free name to writing it: two screenshots in one second (f12 twice) would
otherwise both take the same name, and the second would replace the first."""


def save_screenshot(svg: str, directory: Path, now: datetime) -> tuple[Path, Path | None]:
    """The SVG written atomically, and a PNG beside it when a converter is at hand (None if not)."""
    fix = "free some space or make the sessions folder writable (--sessions-dir)"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecplayError(f"cannot save a screenshot in {directory}: {exc.strerror or exc}; {fix}") from None
    with _NAMING:
        svg_path = write_output(
            free_path(directory, f"specplay_{now.strftime('%Y-%m-%dT%H-%M-%S')}", ".svg"), svg, fix=fix
        )
    return svg_path, to_png(svg_path)


def to_png(svg_path: Path) -> Path | None:
    """rsvg-convert's rendering of `svg_path`, or None without the converter or when it fails
    (the SVG is the screenshot; the PNG is a convenience)."""
    converter = shutil.which("rsvg-convert")
    if converter is None:
        return None
    png = svg_path.with_suffix(".png")
    partial = png.with_name(f".{png.name}.tmp")
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".svg", encoding="utf-8") as laid_out:
            laid_out.write(leading_spaces_as_offsets(svg_path.read_text(encoding="utf-8")))
            laid_out.flush()
            subprocess.run(
                [converter, "--format", "png", "--output", str(partial), laid_out.name],
                check=True,
                capture_output=True,
                timeout=CONVERT_TIMEOUT_S,
            )
        os.replace(partial, png)
    except (OSError, subprocess.SubprocessError):
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return None
    return png


def leading_spaces_as_offsets(svg: str) -> str:
    """rsvg-convert draws a text run's leading spaces after its word (a styled token " read"
    shows as "read "), so each run that starts with spaces starts that many cells later instead."""

    def shift(match: re.Match[str]) -> str:
        start, x, mid, length, open_end, spaces, rest = match.groups()
        count = spaces.count("&#160;")
        chars = count + len(re.sub(r"&[^;]+;", "_", rest[: -len("</text>")]))
        cell = float(length) / chars if chars else 0.0
        return f"{start}{float(x) + count * cell:g}{mid}{float(length) - count * cell:g}{open_end}{rest}"

    return _LEADING_SPACES.sub(shift, svg)
