"""GGUF files converted once and kept: a folder per file content, written whole or not at all.

A conversion goes into a temporary folder beside its final place and is renamed there only when complete,
so an interrupted run (Ctrl-C, a kill, a full disk) leaves nothing a later run would trust. Temporary
names carry their process id and host; later runs remove those whose process is gone. The marker of a
finished folder records a fingerprint of each file it wrote, checked whenever the folder is served: one
cut short or edited since is rebuilt, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specplay.errors import ModelError, detail_of
from specplay.files.cache_dir import cache_root
from specplay.files.json_text import dump_json, read_json

FORMAT = 1
"""The layout of converted folders: a folder from another version is converted again."""
MARKER = "specplay-gguf.json"
INDEX = "hashes.json"
_TEMP_PREFIX = ".tmp-"
_BLOCK = 2**20
_FOREIGN_TEMP_AGE = 24 * 3600
_FULL_HASH_LIMIT = 256 * 2**20
_SAMPLE = 4 * 2**20

Progress = Callable[[str, int, int], None]


def default_cache_dir() -> Path:
    """The cache's gguf folder (specplay/files/cache_dir.py says where the cache is)."""
    return cache_root() / "gguf"


def _hash(path: Path, on_progress: Progress | None) -> str:
    size = path.stat().st_size
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
            done += len(block)
            if on_progress:
                on_progress("hashing", done, size)
    return digest.hexdigest()


def content_hash(path: Path, cache_dir: Path, on_progress: Progress | None = None) -> str:
    """The file's SHA-256, remembered by (path, size, mtime) in the cache's index so each run need not reread it."""
    stat = path.stat()
    key = str(path.resolve())
    stamp = [stat.st_size, stat.st_mtime_ns]
    index_file = cache_dir / INDEX
    try:
        index = read_json(index_file, "GGUF cache index")
        assert isinstance(index, dict)
    except (OSError, ValueError, AssertionError, RecursionError):
        index = {}
    entry = index.get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = _hash(path, on_progress)
    index = {k: v for k, v in index.items() if os.path.exists(k)}  # forget files since deleted
    index[key] = {"stamp": stamp, "sha256": digest}
    # The index only saves time: a cache it cannot be written to still works.
    with contextlib.suppress(OSError):
        _write_atomic(index_file, dump_json(index, indent=1))
    return digest


def _temp_name(label: str) -> str:
    """A temporary name that says which process on which machine owns it."""
    return f"{_TEMP_PREFIX}{os.getpid()}@{socket.gethostname()}@{label}-{secrets.token_hex(4)}"


def _write_atomic(file: Path, text: str) -> None:
    temp = file.parent / _temp_name(file.name)
    try:
        temp.write_text(text)
        os.replace(temp, file)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _abandoned(entry: Path) -> bool:
    """Left by a process that is gone: one of this machine whose id is free, or (a cache shared across
    machines) one of another machine untouched for a day."""
    pid, _, rest = entry.name[len(_TEMP_PREFIX) :].partition("@")
    host = rest.partition("@")[0]
    if not (pid.isascii() and pid.isdigit()) or not host:
        return False
    if host == socket.gethostname():
        return not _alive(int(pid))
    try:
        return time.time() - entry.stat().st_mtime > _FOREIGN_TEMP_AGE
    except OSError:
        return False


def remove_stale_temps(cache_dir: Path) -> None:
    """Remove temporary folders and files that conversions killed mid-way left behind."""
    for entry in cache_dir.glob(_TEMP_PREFIX + "*"):
        if _abandoned(entry):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def _fingerprint(file: Path) -> str:
    """A file's SHA-256; past _FULL_HASH_LIMIT, of its size and its first and last _SAMPLE bytes, so
    checking a large model's weights on every run costs milliseconds (a truncation still shows)."""
    size = file.stat().st_size
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        if size <= _FULL_HASH_LIMIT:
            while block := handle.read(_BLOCK):
                digest.update(block)
        else:
            digest.update(f"{size}:".encode())
            digest.update(handle.read(_SAMPLE))
            handle.seek(size - _SAMPLE)
            digest.update(handle.read(_SAMPLE))
    return digest.hexdigest()


def inventory(folder: Path) -> dict[str, str]:
    """Every file of a converted folder (but its marker), by name, with its fingerprint."""
    return {f.name: _fingerprint(f) for f in sorted(folder.iterdir()) if f.name != MARKER and f.is_file()}


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = read_json(folder / MARKER, "GGUF cache marker")
    except (OSError, ValueError, RecursionError):
        return None
    return marker if isinstance(marker, dict) else None


def is_complete(folder: Path, digest: str) -> bool:
    """A folder a finished conversion of this content renamed into place, holding exactly the files
    it wrote (a file cut short, edited, added or removed since makes it damaged)."""
    marker = _marker(folder)
    if marker is None or marker.get("sha256") != digest or marker.get("format") != FORMAT:
        return False
    try:
        return marker.get("files") == inventory(folder)
    except OSError:
        return False


def _unwritable(cache_dir: Path, exc: OSError) -> ModelError:
    return ModelError(
        f"cannot write the GGUF cache {cache_dir} ({exc.strerror or exc}); free space there "
        "or set SPECPLAY_CACHE_DIR to a writable folder with room"
    )


def _publish(temp: Path, final: Path, digest: str) -> None:
    """Rename the finished `temp` into place, unless another process has just put the same there."""
    if final.exists():
        if is_complete(final, digest):
            shutil.rmtree(temp, ignore_errors=True)
            return
        _remove_damaged(final)  # damaged, or from an older converter
    try:
        temp.rename(final)
    except OSError:
        if not is_complete(final, digest):
            raise
        shutil.rmtree(temp, ignore_errors=True)


def _remove_damaged(folder: Path) -> None:
    """A damaged conversion goes (renamed aside first, so no reader sees half of it) before its
    rebuild takes its place; one that cannot be removed is named, for the user to delete."""
    aside = folder.parent / _temp_name(folder.name)
    try:
        folder.rename(aside)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ModelError(
            f"the converted model {folder} is damaged (its files are not those its conversion wrote) and "
            f"cannot be rebuilt ({exc.strerror or exc}); delete that folder and run again"
        ) from None
    shutil.rmtree(aside, ignore_errors=True)


def converted_folder(path: Path, cache_dir: Path | None = None, on_progress: Progress | None = None) -> Path:
    """The mlx-lm folder converted from GGUF file `path`, from the cache when it is there (keyed by the
    file's content hash); converted once otherwise.

    `on_progress(stage, done, total)` reports "hashing" (bytes read) and "converting" (tensors written).
    Raises ModelError, one line naming the file and the fix, for anything it cannot convert or cache.
    """
    from specplay.backends.mlx.gguf.convert import check_loads, write_folder
    from specplay.backends.mlx.gguf.reader import USE_FOLDER, check_magic, read_gguf

    path = Path(path).expanduser()
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if not path.exists():
        raise ModelError(f"GGUF file {path} not found; check the path")
    if not path.is_file():
        raise ModelError(f"{path} is not a file; pass a .gguf model file")
    check_magic(path)  # refuse what is not GGUF before hashing or touching the cache
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(cache_dir, exc) from exc
    digest = content_hash(path, cache_dir, on_progress)
    final = cache_dir / f"{digest[:32]}-v{FORMAT}"
    if is_complete(final, digest):
        return final
    if final.exists():
        _remove_damaged(final)
    gguf = read_gguf(path)
    remove_stale_temps(cache_dir)
    temp = cache_dir / _temp_name(final.name)
    try:
        temp.mkdir()
        config = write_folder(gguf, temp, on_progress)
        check_loads(temp, path)
        marker = {
            "format": FORMAT,
            "sha256": digest,
            "source": str(path.resolve()),
            "model_type": config["model_type"],
            "files": inventory(temp),
        }
        (temp / MARKER).write_text(dump_json(marker, indent=2))
        _publish(temp, final, digest)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise _unwritable(cache_dir, exc) from exc
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, OverflowError) as exc:
        shutil.rmtree(temp, ignore_errors=True)  # metadata of the wrong type or value, most likely
        raise ModelError(
            f"{path} cannot be converted: its metadata is not what a {gguf.architecture} GGUF file holds "
            f"({detail_of(exc, 120)}); if it is damaged download it again, else {USE_FOLDER}"
        ) from exc
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return final
