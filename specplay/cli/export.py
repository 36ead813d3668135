"""`specplay export`: a session as a Markdown transcript, an HTML page, or its raw JSONL log."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specplay.cli.configure import path_flag
from specplay.cli.diff import open_session
from specplay.cli.flags import add_sessions_dir_flag
from specplay.store.export import FORMATS, export_session
from specplay.store.files import write_output

_SUFFIXES = {"md": "md", "markdown": "md", "html": "html", "htm": "html", "jsonl": "jsonl"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="write a session as Markdown, HTML or its raw JSONL log")
    parser.add_argument("session", metavar="SESSION", help="session path or id")
    parser.add_argument(
        "--format", choices=FORMATS, help="md, html or jsonl (default: from the -o file's suffix, else md)"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of to stdout")
    add_sessions_dir_flag(parser)
    parser.set_defaults(command=export)


def output_format(chosen: str | None, output: Path | None) -> str:
    if chosen is not None:
        return chosen
    suffix = output.suffix.lstrip(".").lower() if output is not None else ""
    return _SUFFIXES.get(suffix, "md")


def export(args: argparse.Namespace) -> int:
    output = path_flag(args.output, "output") if args.output is not None else None
    session = open_session(args.session, args)
    fmt = output_format(args.format, output)
    text = export_session(session, fmt)
    if output is None:
        sys.stdout.write(text)
        return 0
    write_output(output, text, fix="choose another -o file")
    print(f"wrote {fmt} export of session {session.id} to {output}")
    return 0
