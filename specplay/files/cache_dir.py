"""Where specplay keeps what it downloads or converts, for every command and test run alike."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SPECPLAY_CACHE_DIR"


def cache_root() -> Path:
    """$SPECPLAY_CACHE_DIR, else $XDG_CACHE_HOME/specplay, else ~/.cache/specplay."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specplay"
