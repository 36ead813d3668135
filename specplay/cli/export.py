"""`specplay export`: a session as a Markdown transcript, an HTML page, or its raw JSONL log."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from specplay.cli.diff import open_session
from specplay.cli.flags import add_sessions_dir_flag
from specplay.errors import SpecplayError
from specplay.store.export import FORMATS, export_session

_SUFFIXES = {"md": "md", "markdown": "md", "html": "html", "htm": "html", "jsonl": "jsonl"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="write a session as Markdown, HTML or its raw JSONL log")
    parser.add_argument("session", metavar="SESSION", help="session path or id")
    parser.add_argument(
        "--format", choices=FORMATS, help="md, html or jsonl (default: from the -o file's suffix, else md)"
    )
    parser.add_argument("-o", "--output", metavar="FILE", type=Path, help="write here instead of to stdout")
    add_sessions_dir_flag(parser)
    parser.set_defaults(command=export)


def output_format(chosen: str | None, output: Path | None) -> str:
    if chosen is not None:
        return chosen
    suffix = output.suffix.lstrip(".").lower() if output is not None else ""
    return _SUFFIXES.get(suffix, "md")


def write_atomically(path: Path, text: str) -> None:
    """Write beside `path` and rename into place: a reader never sees half a file."""
    # Created exclusively with the user's umask (mkstemp would leave the export private, 0600).
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        out = temp.open("x", encoding="utf-8")
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        with out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise _cannot_write(path, exc) from None


def _cannot_write(path: Path, exc: OSError) -> SpecplayError:
    return SpecplayError(f"cannot write {path}: {exc.strerror or exc}; choose another -o file")


def export(args: argparse.Namespace) -> int:
    session = open_session(args.session, args)
    fmt = output_format(args.format, args.output)
    text = export_session(session, fmt)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_atomically(args.output, text)
    print(f"wrote {fmt} export of session {session.id} to {args.output}")
    return 0
