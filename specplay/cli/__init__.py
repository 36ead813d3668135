"""The `specplay` command line."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING

from specplay import __version__
from specplay.cli.early_keys import keys_kept
from specplay.errors import SpecplayError, error_line

if TYPE_CHECKING:
    from specplay.cli.flags import Parser

TOP_LEVEL_FLAGS = ("-h", "--help", "--version")
PIPE_CLOSED = 141
"""The exit status when the reader of stdout left (`| head`): 128 + SIGPIPE, what a shell reports
for `cat` ended by that signal, so `set -o pipefail` scripts treat specplay as they treat it."""


def tolerate_narrow_encodings() -> None:
    """Output a terminal's encoding cannot hold (PYTHONIOENCODING=ascii, LANG=C) is written as
    backslash escapes instead of ending the command with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            reconfigure(errors="backslashreplace")


def build_parser() -> Parser:
    # The commands import the models' libraries (about half a second, seconds on a loaded machine):
    # imported here, after main holds the keys typed while the playground starts.
    from specplay.cli import (
        bench,
        costs,
        diff,
        distill,
        export,
        fetch,
        fidelity,
        router,
        run,
        sessions,
        tui,
        vllm_launch,
    )
    from specplay.cli.flags import Parser

    parser = Parser(prog="specplay", description="A playground for seeing speculative decoding.")
    parser.add_argument("--version", action="version", version=f"specplay {__version__}")
    subparsers = parser.add_subparsers(metavar="COMMAND", parser_class=Parser)
    run.add_parser(subparsers)
    sessions.add_parser(subparsers)
    fidelity.add_parser(subparsers)
    diff.add_parser(subparsers)
    export.add_parser(subparsers)
    bench.add_parser(subparsers)
    costs.add_parser(subparsers)
    router.add_parser(subparsers)
    distill.add_parser(subparsers)
    fetch.add_parser(subparsers)
    tui.add_parser(subparsers)
    vllm_launch.add_parser(subparsers)
    parser.commands = set(subparsers.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command's exit status. A reader that left stdout (`| head -c 10`) ends any command
    quietly with PIPE_CLOSED: no traceback, and no error line on a stderr that may share the pipe."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            with keys_kept(sys.stdin) if opens_playground(argv) else nullcontext():
                return _main(argv)
        finally:
            sys.stdout.flush()  # output still buffered meets the closed pipe here, not at exit
    except BrokenPipeError:
        _stdout_to_devnull()
        return PIPE_CLOSED


def _stdout_to_devnull() -> None:
    """Points stdout at /dev/null, so the interpreter's last flush of what is still buffered has
    somewhere to go (Python's documented recipe for SIGPIPE)."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):  # a stream without a file (captured in tests): nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def opens_playground(argv: list[str]) -> bool:
    """Whether `argv` opens the playground, told before the commands are imported: no command, `tui`,
    or the playground's flags alone (`specplay --target smollm2`)."""
    return not argv or argv[0] == "tui" or (argv[0].startswith("-") and argv[0] not in TOP_LEVEL_FLAGS)


def _main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models come from folders or the local cache only
    tolerate_narrow_encodings()
    parser = build_parser()
    if not argv or (argv[0] not in parser.commands and argv[0] not in TOP_LEVEL_FLAGS):
        argv = ["tui", *argv]  # no command: the playground (on the default models when none are named)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return args.command(args)
    except SpecplayError as error:
        print(f"specplay: error: {error_line(error)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("specplay: interrupted", file=sys.stderr)
        return 130
    return 2
