"""Every command the README and docs/ show is one today's specplay takes: `specplay …` lines parse
with the CLI's own parser (command, flags, value types), usage lines name only flags the command
has, `python benchmarks/…` and `python scripts/…` lines name a script that exists and flags it
defines, and the cheap ones run on the demo models as written."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from specplay.cli import TOP_LEVEL_FLAGS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]
USAGE = re.compile(r"\[|\]|\||\.\.\.|…")
"""A usage line (`specplay run --target T [--draft ...]`) rather than a command to type."""


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    words: list[str]
    typed: bool
    """In a code block: a command to type, whole. Inline `code` in a sentence may name a command
    or a flag without its other arguments: only its flags are checked."""

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {shlex.join(self.words)}"


def _shell_lines(text: str) -> list[tuple[int, str, bool]]:
    """Command lines of a page: code blocks' lines (continuations joined; typed) and inline `code`."""
    lines: list[tuple[int, str, bool]] = []
    in_block, pending, start = False, "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            line = raw.strip()
            if pending:
                line, pending = pending + " " + line, ""
            else:
                start = number
            if line.endswith("\\"):
                pending = line[:-1].strip()
                continue
            lines += [(start, part.strip(), True) for part in line.split("&&")]
        else:
            lines += [(number, code, False) for code in re.findall(r"`([^`]+)`", raw)]
    return lines


def _words(line: str) -> list[str] | None:
    line = re.sub(r"\s+#\s.*$", "", line)  # a trailing comment
    try:
        return shlex.split(line)
    except ValueError:
        return None


def commands(program: str) -> list[Command]:
    """Every line of every page that runs `program` (`specplay`, or a script under python)."""
    found = []
    for page in PAGES:
        for number, line, typed in _shell_lines(page.read_text(encoding="utf-8")):
            words = _words(line)
            if not words:
                continue
            head = words[0].removeprefix(".venv/bin/")
            if head == program or (program == "python" and head in ("python", "python3")):
                found.append(Command(page.relative_to(ROOT).as_posix(), number, [head, *words[1:]], typed))
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return dict(action.choices) if action is not None else {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def _argv(command: Command) -> list[str]:
    argv = command.words[1:]
    parser = build_parser()
    if not argv or (argv[0] not in parser.commands and argv[0] not in TOP_LEVEL_FLAGS):
        argv = ["tui", *argv]  # as `specplay` itself reads it
    return argv


def test_the_pages_show_commands() -> None:
    assert len(commands("specplay")) > 60 and len(commands("python")) > 10


def test_every_specplay_command_parses() -> None:
    parser, refused = build_parser(), []
    typed = [c for c in commands("specplay") if c.typed]
    assert len(typed) > 20
    for command in typed:
        argv = _argv(command)
        if USAGE.search(" ".join(command.words)):
            continue  # usage lines: their flags are checked below
        if argv[0] in TOP_LEVEL_FLAGS or "--help" in argv:
            continue
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                parser.parse_args(argv)
            except SystemExit:
                refused.append(f"{command}\n    {err.getvalue().strip()}")
    assert refused == []


def test_usage_lines_name_only_flags_the_command_has() -> None:
    subparsers, unknown, checked = _subparsers(build_parser()), [], 0
    for command in commands("specplay"):
        argv = _argv(command)
        if argv[0] not in subparsers:
            continue
        parser = subparsers[argv[0]]
        actions = _subparsers(parser)  # a command's own actions (`specplay router train`)
        flags = _flags(actions[argv[1]] if len(argv) > 1 and argv[1] in actions else parser)
        for word in argv[1:]:
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", word):
                checked += 1
                if flag not in flags:
                    unknown.append(f"{command}: {flag}")
    assert checked > 80 and unknown == []


def _script_source(words: list[str]) -> tuple[str, str] | None:
    """(what the command runs, its source) for `python FILE.py …` or `python -m PACKAGE.MODULE …`
    of this repository; None for another kind of python line."""
    if len(words) > 2 and words[1] == "-m" and words[2].startswith("benchmarks"):
        path = ROOT.joinpath(*words[2].split("."))
        files = sorted(path.glob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
        return words[2], "".join(f.read_text(encoding="utf-8") for f in files if f.is_file())
    if len(words) > 1 and words[1].endswith(".py"):
        path = ROOT / words[1]
        return words[1], path.read_text(encoding="utf-8") if path.is_file() else ""
    return None


def test_script_commands_name_scripts_and_flags_that_exist() -> None:
    missing, scripts = [], 0
    for command in commands("python"):
        found = _script_source(command.words)
        if found is None:
            continue
        scripts += 1
        name, source = found
        if not source:
            missing.append(f"{command}: no such script")
            continue
        for word in command.words[2:]:
            flag = word.split("=")[0]
            if flag.startswith("--") and f'"{flag}"' not in source:
                missing.append(f"{command}: {flag} is not an option of {name}")
    assert scripts > 10 and missing == []


def test_every_benchmark_imports_without_a_sibling_on_its_path() -> None:
    """Benchmarks import specplay and their own package, never each other as loose scripts."""
    code = (
        "import importlib, pathlib, sys\n"
        "sys.path = [p for p in sys.path if not p.endswith('benchmarks')]\n"
        "for path in sorted(pathlib.Path('benchmarks').rglob('*.py')):\n"
        "    importlib.import_module('.'.join(path.with_suffix('').parts))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


CHEAP = [
    ["specplay", "fetch"],
    ["specplay", "sessions"],
    ["specplay", "vllm-launch", "--target", "Qwen/Qwen3-8B", "--draft", "small=Qwen/Qwen3-0.6B"],
]


@pytest.mark.parametrize("words", CHEAP, ids=lambda w: " ".join(w[1:3]))
def test_cheap_commands_run_as_written(
    words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Commands the pages show that need no model run as written, in a fresh home."""
    shown = [c.words for c in commands("specplay")]
    assert words in shown, f"{shlex.join(words)} is no longer in the docs: update this list"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(words[1:]) == 0
    assert capsys.readouterr().out.strip()


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    heads = re.findall(r"(?m)^#{1,6} (.+)$", page.read_text(encoding="utf-8"))
    return {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in heads}


def test_every_link_between_pages_leads_somewhere() -> None:
    broken, links = [], 0
    for page in PAGES:
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            links += 1
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists() or (anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert links > 20 and broken == []
