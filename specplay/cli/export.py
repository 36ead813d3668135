"""`specplay export`: sessions as a review page (HTML), a Markdown transcript, or one's raw JSONL log."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specplay.cli.configure import path_flag
from specplay.cli.diff import open_session
from specplay.cli.flags import add_sessions_dir_flag
from specplay.files.outputs import standard_stream, write_output
from specplay.review import FORMATS, export_sessions

_SUFFIXES = {"md": "md", "markdown": "md", "html": "html", "htm": "html", "jsonl": "jsonl"}
STDOUT = "-"
"""`-o -`: stdout, as without -o (never a file named `-`)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write sessions as a review page (HTML), a Markdown transcript, or a session's raw JSONL log",
        description="One session: its lanes side by side. Several sessions of one prompt (a TV-budget or "
        "k sweep): their texts as columns, each aligned to the first target-only text among them. A "
        "conversation: turn by turn, each turn's prompt then its answers, and the whole conversation's numbers.",
    )
    parser.add_argument("sessions", nargs="+", metavar="SESSION", help="session path or id")
    parser.add_argument(
        "--format", choices=FORMATS, help="md, html or jsonl (default: from the -o file's suffix, else md)"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write here instead of to stdout (`-`, or /dev/stdout: stdout itself, the export alone)",
    )
    add_sessions_dir_flag(parser)
    parser.set_defaults(command=export)


def output_format(chosen: str | None, output: Path | None) -> str:
    if chosen is not None:
        return chosen
    suffix = output.suffix.lstrip(".").lower() if output is not None else ""
    return _SUFFIXES.get(suffix, "md")


def export(args: argparse.Namespace) -> int:
    output = path_flag(args.output, "output") if args.output not in (None, STDOUT) else None
    sessions = [open_session(name, args) for name in args.sessions]
    fmt = output_format(args.format, output)
    text = export_sessions(sessions, fmt)
    if output is None or standard_stream(output) is sys.stdout:
        # The export alone: `-o /dev/stdout | wc -c` counts it, with no line saying where it went.
        sys.stdout.write(text)
        return 0
    write_output(output, text, fix="choose another -o file")
    what = f"session {sessions[0].id}" if len(sessions) == 1 else f"{len(sessions)} sessions"
    print(f"wrote {fmt} export of {what} to {output}")
    return 0
