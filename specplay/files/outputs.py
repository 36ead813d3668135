"""Writing a file the user named (an export, a report, a plot) without harming what is there.

- A regular file is replaced atomically: written beside it, then renamed over it, so a reader
  sees the old file or the new one, never half of one.
- A device or a named pipe (/dev/null, /dev/stdout, a FIFO) is written into, never replaced. A
  name for what this process's stdout or stderr already writes to (/dev/stdout, /dev/fd/2, the
  file `>> log` opened) is written through that stream: after what is there, never truncated.
- A symbolic link is followed: its target is written as above, the link stays.
- A specplay session is never overwritten, and a folder is never a file.
- In an output folder (a report, a trained drafter), a file is replaced only when the folder's
  record of outputs (OUTPUTS_RECORD, written before them) says specplay wrote it: a user's own
  model.safetensors or report.md there is refused, never replaced. A link there (the record
  itself, or any file specplay would write) is refused, never followed: specplay made no links.
Errors are one SpecplayError line naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from specplay.errors import SpecplayError
from specplay.files.json_text import dump_json, read_json

SESSION_START = b'{"type": "header"'
"""How every session file begins (the session writer puts the header first, its type first): a
file that does is never overwritten."""


def write_output(path: Path, content: str | bytes, fix: str = "choose another file") -> Path:
    """Write `content` (text as UTF-8) to `path` by the rules above; returns where it went."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    if not str(path):
        raise SpecplayError(f"no file name given; {fix}")
    target = path.resolve() if path.is_symlink() else path
    try:
        # Followed as the kernel follows it: /dev/stdout's link names "pipe:[…]", which resolve() cannot.
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise _cannot(path, exc, fix) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise SpecplayError(f"{path} is a folder, not a file; {fix}")
    if mode is not None and (stream := standard_stream(path)) is not None:
        stream.flush()  # what was printed before comes first
        _write_into(path, stream.fileno(), data, fix)
        return path
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        try:
            descriptor = os.open(path, os.O_WRONLY)  # a device or a pipe: written into, never replaced
        except OSError as exc:
            raise _cannot(path, exc, fix) from None
        try:
            _write_into(path, descriptor, data, fix)
        finally:
            os.close(descriptor)
        return path
    if mode is not None and not stat.S_ISREG(mode):
        raise SpecplayError(f"{path} is not a regular file (a socket or a block device); {fix}")
    if mode is not None and is_session(target):
        raise SpecplayError(f"{path} is a specplay session, which is never overwritten; {fix}")
    _replace_atomically(path, target, data, fix)
    return path


OUTPUTS_RECORD = ".specplay-outputs.json"
"""The files specplay wrote in an output folder, by name."""
OUT_FIX = "choose another --out, or move those files away"


def check_outputs(directory: Path, names: Iterable[str], fix: str) -> None:
    """Refuse, in one line, when `directory` holds any of `names` that specplay did not write there,
    or a link in place of the record or of any of `names`."""
    names = set(names)
    for name in sorted(names | {OUTPUTS_RECORD}):
        refuse_link(directory / name, fix)
    recorded = _recorded(directory)
    foreign = sorted(n for n in set(names) if n not in recorded and os.path.lexists(directory / n))
    if foreign:
        raise SpecplayError(f"{directory} holds {', '.join(foreign)}, which specplay did not write; {fix}")


def claim_outputs(directory: Path, names: Iterable[str], fix: str) -> None:
    """`check_outputs`, then record `names` as specplay's, before they are written (a write cut
    short leaves only files specplay may replace)."""
    names = set(names)
    check_outputs(directory, names, fix)
    record = {"written_by": "specplay", "files": sorted(_recorded(directory) | names)}
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot(directory, exc, fix) from None
    write_in_folder(directory, OUTPUTS_RECORD, dump_json(record, indent=1) + "\n", fix)


def refuse_link(path: Path, fix: str) -> None:
    """One line when `path` is a symbolic link: a file in an output folder is written in place,
    and a link there would carry the write (or a deletion) to a file specplay did not make."""
    if path.is_symlink():
        raise SpecplayError(f"{path} is a symbolic link, which specplay never writes through; {fix}")


def write_in_folder(directory: Path, name: str, content: str | bytes, fix: str) -> Path:
    """`write_output` for a file of an output folder: a link in its place is refused, not followed."""
    refuse_link(directory / name, fix)
    return write_output(directory / name, content, fix)


def _recorded(directory: Path) -> set[str]:
    try:
        record = read_json(directory / OUTPUTS_RECORD, "record of outputs")
    except (SpecplayError, OSError):
        return set()
    files = record.get("files") if isinstance(record, dict) else None
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def free_path(directory: Path, stem: str, suffix: str) -> Path:
    """directory/stem+suffix, or stem_2, stem_3... when a file of that name exists."""
    path, count = directory / f"{stem}{suffix}", 1
    while path.exists():
        count += 1
        path = directory / f"{stem}_{count}{suffix}"
    return path


def is_session(path: Path) -> bool:
    """Whether a regular file holds a specplay session (its first record is a session header)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(SESSION_START)) == SESSION_START
    except OSError:
        return False


def standard_stream(path: Path) -> TextIO | None:
    """sys.stdout or sys.stderr where `path` names the very file it writes to (/dev/stdout, a
    terminal, the pipe or file the shell gave it); None elsewhere, and for a stream with no file."""
    try:
        named = os.stat(path)
    except (OSError, ValueError):
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and os.path.samestat(named, os.fstat(stream.fileno())):
                return stream
        except (OSError, ValueError):  # a stream without a file (captured, closed) names none
            continue
    return None


def _write_into(path: Path, descriptor: int, data: bytes, fix: str) -> None:
    """All of `data` into an open file; a reader that left (BrokenPipeError) is the command's edge's
    to end quietly, not an error line."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(descriptor, view) :]
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _cannot(path, exc, fix) from None


def _replace_atomically(path: Path, target: Path, data: bytes, fix: str) -> None:
    # Created exclusively with the user's umask (mkstemp would leave the file private, 0600).
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        with temp.open("xb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        raise _cannot(path, exc, fix) from None


def _cannot(path: Path, exc: OSError, fix: str) -> SpecplayError:
    return SpecplayError(f"cannot write {path}: {exc.strerror or exc}; {fix}")
