"""The shipped themes (themes/*.toml): where they are, and their colours as plain strings.

The playground turns them into Textual themes; a review page into CSS variables. One file per
theme keeps a token's colour the same wherever it is shown.
"""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any


def themes_dir() -> Path:
    """Inside the package in an installed wheel (the build copies the repo's top-level themes/
    there), else the repo's themes/ beside the package (a checkout or an editable install)."""
    installed = Path(str(files("specplay") / "themes"))
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "themes"


def builtin_theme_files() -> list[Path]:
    return sorted(themes_dir().glob("*.toml"))


def read_theme(path: Path) -> dict[str, Any]:
    """A theme file as TOML data; OSError or tomllib.TOMLDecodeError when it cannot be read.
    Themes written before relaxed tokens had their name call their colour spec-budget."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    variables = data.get("variables")
    if isinstance(variables, dict) and "spec-budget" in variables:
        variables.setdefault("spec-relaxed", variables.pop("spec-budget"))
    return data
