"""Where sessions live: --sessions-dir, else $SPECPLAY_SESSIONS_DIR, else ./sessions."""

from __future__ import annotations

import os
from pathlib import Path

from specplay.store.format import SUFFIX, SessionError

ENV_VAR = "SPECPLAY_SESSIONS_DIR"


def sessions_dir(option: str | Path | None = None) -> Path:
    return Path(option or os.environ.get(ENV_VAR) or "sessions")


def list_session_files(directory: Path) -> list[Path]:
    """Session files, oldest first (names start with their creation time). A folder that does not
    exist holds none; one that cannot be read is a SessionError naming it."""
    fix = f"choose the folder with --sessions-dir or ${ENV_VAR}"
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == SUFFIX and p.is_file())
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise SessionError(f"the sessions folder {directory} is a file, not a folder; {fix}") from None
    except OSError as exc:
        raise SessionError(f"cannot read the sessions folder {directory}: {exc.strerror or exc}; {fix}") from None


def find_session(name: str, directory: Path) -> Path:
    """A session by path, file name, id, or unique id prefix within `directory`."""
    path = Path(name)
    if path.is_file():
        return path
    candidates = [p for p in list_session_files(directory) if p.name == name or p.stem.startswith(name)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise SessionError(f"no session {name!r} in {directory}; `specplay sessions` lists the saved ones")
    raise SessionError(f"{name!r} matches {len(candidates)} sessions in {directory}; give more of its id")
