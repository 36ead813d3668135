"""Files the user names are written without harming what is there; a full disk is one line."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.errors import SpecplayError
from specplay.files.outputs import write_output
from specplay.store import load_session
from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session
from tests.support.tiny_models import TinyModels


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return write_session(tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})


def _export(session: Path, *args: str) -> int:
    return main(["export", str(session), *args])


def test_devices_and_pipes_are_written_into_never_replaced(session: Path, tmp_path: Path) -> None:
    assert _export(session, "-o", "/dev/null") == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    assert _export(session, "-o", str(fifo)) == 0
    reader.join(timeout=30)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and b"## Texts" in received[0]


def test_a_link_is_followed_and_kept(session: Path, tmp_path: Path) -> None:
    target = tmp_path / "real.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert _export(session, "-o", str(link)) == 0
    assert link.is_symlink() and "## Texts" in target.read_text()


@pytest.mark.parametrize(
    "where, message",
    [
        ("session", "is a specplay session, which is never overwritten; choose another -o file"),
        ("folder", "is a folder, not a file"),
        ("/dev/full", "cannot write /dev/full: No space left on device"),
        ("", "--output is empty: give a file or folder name"),  # not the current folder
    ],
)
def test_what_cannot_be_written_is_one_line_and_untouched(
    where: str, message: str, session: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = session.read_bytes()
    path = {"session": str(session), "folder": str(tmp_path)}.get(where, where)
    assert _export(session, "--format", "md", "-o", path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert session.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "report.md"
    path.write_text("old report")
    write_output(path, "new report")
    assert path.read_text() == "new report" and not list(tmp_path.glob(".*.tmp"))


def test_a_full_disk_mid_run_keeps_the_session_readable(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from specplay.store import writer

    written = {"records": 0}
    original = writer.SessionWriter._write

    def filling(self: writer.SessionWriter, record: dict, flush: bool = True) -> None:  # type: ignore[type-arg]
        written["records"] += 1
        if written["records"] > 6:  # the disk fills after a few records
            self._file.write = lambda _: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))  # type: ignore[method-assign]
        original(self, record, flush)

    monkeypatch.setattr(writer.SessionWriter, "_write", filling)
    args = ["run", "--target", str(tiny.target), "--draft", f"near={tiny.near}", "--prompt", "def f(", "--raw"]
    assert main([*args, "--max-tokens", "40", "--ignore-eos", "--save", "--sessions-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device; what was written before is kept" in err
    (path,) = tmp_path.glob("*.jsonl")
    assert not load_session(path).complete and not list(tmp_path.glob(".*.tmp"))


def test_fidelity_plots_are_checked_before_the_run_and_named_where_they_go(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["fidelity", "--target", str(tiny.target), "--draft", f"near={tiny.near}", "--prompt", "x", "--raw"]
    args += ["--samples", "1", "--max-tokens", "3", "--budgets", "0", "--sessions-dir", str(tmp_path / "s")]
    assert main([*args, "--plot", str(tmp_path / "plot.txt")]) == 2
    assert "must end in .png, .svg, .pdf (or name a folder)" in capsys.readouterr().err
    plots = tmp_path / "plots"
    plots.mkdir()
    assert main([*args, "--plot", str(plots)]) == 0
    (plot,) = plots.glob("fidelity_*.png")
    assert f"plot {plot}" in capsys.readouterr().out


def test_write_output_refuses_sockets_and_missing_folders(tmp_path: Path) -> None:
    with pytest.raises(SpecplayError, match="No such file or directory; choose another file"):
        write_output(tmp_path / "missing" / "x.md", "text")


@pytest.mark.parametrize(
    "command",
    [
        ["export", "SESSION", "-o", ""],
        ["bench", "--quick", "--out", ""],
        ["distill", "--target", "t", "--exit-head", "layers=1", "--data", "x", "--out", " "],
    ],
)
def test_an_empty_file_or_folder_name_is_refused(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An empty name would be read as the current folder: a report or a model written all over it."""
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is empty: give a file or folder name" in err, err


def test_piped_output_marks_sources_and_differences_without_colour(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pipe gets no colour, so `run` brackets the sources other than accepted and `diff` marks
    what only one side has, as `git diff --word-diff` does; the legend says which is which."""
    args = ["run", "--target", str(tiny.target), "--draft", f"far={tiny.far}", "--prompt", "def f(x):", "--raw"]
    assert main([*args, "--max-tokens", "24", "--save", "--sessions-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "corrected ⟦x⟧" in out.splitlines()[0] and "⟦" in out.split("\n", 1)[1]  # far drafts badly
    (saved,) = tmp_path.glob("*.jsonl")
    other = ["run", "--target", str(tiny.target), "--mode", "target", "--prompt", "def g(y):", "--raw"]
    assert main([*other, "--max-tokens", "24", "--save", "--sessions-dir", str(tmp_path / "b")]) == 0
    (second,) = (tmp_path / "b").glob("*.jsonl")
    capsys.readouterr()
    assert main(["diff", str(saved), str(second)]) == 0
    out = capsys.readouterr().out
    assert "only in A [-x-]  only in B {+x+}" in out and "[-" in out and "{+" in out
