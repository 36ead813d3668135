"""Where sessions live: --sessions-dir, else $SPECPLAY_SESSIONS_DIR, else ./sessions."""

from __future__ import annotations

import os
from pathlib import Path

from specplay.files.json_text import parse_json
from specplay.store.format import SUFFIX, SessionError

ENV_VAR = "SPECPLAY_SESSIONS_DIR"


def sessions_dir(option: str | Path | None = None) -> Path:
    """The sessions folder; `~` means the home folder here too, as a shell would expand it."""
    return Path(option or os.environ.get(ENV_VAR) or "sessions").expanduser()


def check_sessions_folder(directory: Path) -> None:
    """A SessionError naming the part of `directory` that stands where a folder must be and is
    not one (a file, a link to nothing); nothing where the folder exists or can be made. Checked
    before models load, so a run that could not save stops at once, and by the writer."""
    for part in (directory, *directory.parents):
        if part.is_dir():
            return
        if part.exists() or part.is_symlink():
            what = "a link to nothing" if part.is_symlink() and not part.exists() else "a file"
            raise SessionError(
                f"cannot write sessions to {directory}: {part} is {what}, not a folder; "
                f"choose another folder with --sessions-dir or ${ENV_VAR}"
            )


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
    """A session by path, file name, id, or a unique beginning or end of its id within `directory`
    (ids start with their time; the end is the random part: `e13dce`)."""
    path = Path(name)
    if path.is_file():
        return path
    files = list_session_files(directory)
    exact = [p for p in files if name in (p.name, p.stem)]
    candidates = exact or [p for p in files if name and (p.stem.startswith(name) or p.stem.endswith(name))]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise SessionError(f"no session {name!r} in {directory}; `specplay sessions` lists the saved ones")
    raise SessionError(f"{name!r} matches {len(candidates)} sessions in {directory}; give more of its id")


HEADER_LINE_LIMIT = 1 << 20
"""Bytes read for a header line when listing: a session's header holds its prompt and settings."""


def session_prompt(path: Path) -> str | None:
    """A saved session's prompt from its header line alone, for lists (None where it cannot be read)."""
    try:
        with path.open(encoding="utf-8") as file:
            header = parse_json(file.readline(HEADER_LINE_LIMIT), f"session {path}")
    except (OSError, ValueError):
        return None
    prompt = header.get("prompt") if isinstance(header, dict) else None
    return prompt if isinstance(prompt, str) else None
