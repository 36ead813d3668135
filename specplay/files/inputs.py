"""Reading a file specplay takes as input (a prompt, a session, a config, training data) with a
size limit: at most limit + 1 bytes are ever read, so `/dev/zero` or a huge file is refused in
one line instead of filling memory. Errors are one InputError naming the file and the fix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from specplay.errors import SpecplayError

MiB = 1 << 20
PROMPT_LIMIT = 16 * MiB
"""A prompt file, a theme: text a person wrote."""
CONFIG_LIMIT = 16 * MiB
"""A model's or a cache's JSON (config.json, tokenizer_config.json, a marker, an index)."""
TOKENIZER_LIMIT = 256 * MiB
"""tokenizer.json: the largest vocabularies take tens of MiB."""
SESSION_LIMIT = 256 * MiB
"""A saved session: thousands of tokens with their rounds are a few MiB."""
DATA_LIMIT = 256 * MiB
"""A training or benchmark data file (prompts)."""
ROUTER_LIMIT = 16 * MiB
"""A learned router file (`specplay router train`): a few hundred KB."""


class InputError(SpecplayError, OSError):
    """An input file that cannot be read (an OSError to code that reads files); `detail` is what is
    wrong with it, without its name."""

    def __init__(self, what: str, path: Path, detail: str) -> None:
        super().__init__(f"{what} {str(path)!r} {detail}")
        self.detail = detail


def size_text(size: int) -> str:
    return f"{size / MiB:g} MiB" if size >= MiB else f"{size} bytes"


def _read_at_most(handle: BinaryIO, most: int) -> bytes:
    """Up to `most` bytes. read(n) sets aside n bytes before reading any, so a regular file is read
    at its size (reading a small session would otherwise take the whole limit); the rest of one
    that grew meanwhile, and a pipe or device of no known size, up to `most`."""
    size = os.fstat(handle.fileno()).st_size
    if not size:  # a pipe or a device: no size to go by
        return handle.read(most)
    data = handle.read(min(size, most))
    if len(data) < most and (more := handle.read(1)):  # it grew while being read
        data += more + handle.read(most - len(data) - 1)
    return data


def read_input(path: Path, what: str, limit: int, fix: str = "give a smaller file") -> bytes:
    """The bytes of `path` (`what` names it in errors: "--prompt-file"), refused above `limit`."""
    try:
        with path.open("rb") as handle:
            data = _read_at_most(handle, limit + 1)
    except FileNotFoundError:
        raise InputError(what, path, "does not exist; check the path") from None
    except IsADirectoryError:
        raise InputError(what, path, "is a folder, not a file; give a file") from None
    except OSError as exc:
        raise InputError(what, path, f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(what, path, f"is larger than specplay reads ({size_text(limit)}); {fix}")
    return data


def read_input_text(path: Path, what: str, limit: int, errors: str = "strict", fix: str = "give a smaller file") -> str:
    """`read_input` as UTF-8 text; with errors="strict", bytes that are not UTF-8 are one line."""
    data = read_input(path, what, limit, fix)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as exc:
        raise InputError(what, path, f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
