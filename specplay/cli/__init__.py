"""The `specplay` command line."""

from __future__ import annotations

import os
import sys

from specplay import __version__
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
from specplay.errors import SpecplayError, error_line

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
    try:
        try:
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


def _main(argv: list[str] | None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models come from folders or the local cache only
    tolerate_narrow_encodings()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
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
