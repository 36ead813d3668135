"""Themes from TOML files: Textual's colour fields plus the token colours as theme variables."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.theme import Theme

from specplay.display.themes import builtin_theme_files, read_theme

DEFAULT_THEME = "specplay-dark"
TOKEN_VARIABLES = ("spec-accepted", "spec-relaxed", "spec-corrected", "spec-bonus", "spec-marker")
"""Theme variables every specplay theme defines, one per speculative token source. A theme may
also set `spec-border`, the panels' border colour (else the default theme's)."""

_COLOUR_FIELDS = ("primary", "secondary", "accent", "warning", "error", "success")
_COLOUR_FIELDS += ("foreground", "background", "surface", "panel", "boost")


class ThemeError(ValueError):
    pass


def theme_from_toml(path: Path) -> Theme:
    try:
        data: dict[str, Any] = read_theme(path)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ThemeError(f"theme {path.name} cannot be read: {exc}") from None
    variables = {str(k): str(v) for k, v in data.get("variables", {}).items()}
    missing = [name for name in TOKEN_VARIABLES if name not in variables]
    if "name" not in data or "primary" not in data or missing:
        raise ThemeError(f"theme {path.name} needs name, primary and [variables] {', '.join(TOKEN_VARIABLES)}")
    colours = {name: str(data[name]) for name in _COLOUR_FIELDS if name in data}
    return Theme(name=str(data["name"]), dark=bool(data.get("dark", True)), variables=variables, **colours)


def load_themes(paths: Iterable[Path] | None = None) -> list[Theme]:
    return [theme_from_toml(path) for path in (builtin_theme_files() if paths is None else paths)]
