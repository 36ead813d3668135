"""GGUF files converted once and kept: a folder per file content, written whole or not at all.

A conversion goes into a temporary folder beside its final place and is renamed there only when complete,
so an interrupted run (Ctrl-C, a kill, a full disk) leaves nothing a later run would trust. Temporary
names carry their process id and host; later runs remove those whose process is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from specplay.cache import cache_root
from specplay.errors import ModelError, detail_of

FORMAT = 1
"""The layout of converted folders: a folder from another version is converted again."""
MARKER = "specplay-gguf.json"
INDEX = "hashes.json"
_TEMP_PREFIX = ".tmp-"
_BLOCK = 2**20
_FOREIGN_TEMP_AGE = 24 * 3600

Progress = Callable[[str, int, int], None]


def default_cache_dir() -> Path:
    """The cache's gguf folder (specplay/cache.py says where the cache is)."""
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
        index = json.loads(index_file.read_text())
        assert isinstance(index, dict)
    except (OSError, ValueError, AssertionError):
        index = {}
    entry = index.get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = _hash(path, on_progress)
    index = {k: v for k, v in index.items() if os.path.exists(k)}  # forget files since deleted
    index[key] = {"stamp": stamp, "sha256": digest}
    # The index only saves time: a cache it cannot be written to still works.
    with contextlib.suppress(OSError):
        _write_atomic(index_file, json.dumps(index, indent=1))
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


def is_complete(folder: Path, digest: str) -> bool:
    """A folder a finished conversion of this content renamed into place."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("sha256") == digest and marker.get("format") == FORMAT and (folder / "config.json").is_file()


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
        shutil.rmtree(final, ignore_errors=True)  # damaged, or from an older converter
    try:
        temp.rename(final)
    except OSError:
        if not is_complete(final, digest):
            raise
        shutil.rmtree(temp, ignore_errors=True)


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
    gguf = read_gguf(path)
    remove_stale_temps(cache_dir)
    temp = cache_dir / _temp_name(final.name)
    try:
        temp.mkdir()
        config = write_folder(gguf, temp, on_progress)
        check_loads(temp, path)
        marker = {"format": FORMAT, "sha256": digest, "source": str(path.resolve()), "model_type": config["model_type"]}
        (temp / MARKER).write_text(json.dumps(marker, indent=2))
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
