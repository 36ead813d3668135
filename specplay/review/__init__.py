"""Reviews: runs of one prompt, lined up against the target-only text, as a page or a transcript.

Review is how a reader decides whether a speedup was worth it: the texts side by side, every
difference from the target-only text marked, each token's provenance a hover away.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specplay.errors import SpecplayError
from specplay.files.outputs import write_output
from specplay.review.build import Review, review_sessions, review_sweep
from specplay.review.html import to_html
from specplay.review.markdown import to_markdown
from specplay.store import load_session
from specplay.store.format import Session
from specplay.store.writer import session_jsonl

FORMATS = ("md", "html", "jsonl")

__all__ = [
    "FORMATS",
    "Review",
    "export_review",
    "export_sessions",
    "review_sessions",
    "review_sweep",
    "reviews_dir",
    "to_html",
    "to_markdown",
]


def export_sessions(sessions: Sequence[Session], fmt: str) -> str:
    """One document for `sessions` (of one prompt); the raw log is one session's only."""
    if fmt == "jsonl":
        if len(sessions) != 1:
            raise SpecplayError("--format jsonl writes one session's raw log; give one session, or choose md or html")
        return session_jsonl(sessions[0].records)
    if fmt == "md":
        return to_markdown(review_sessions(sessions))
    if fmt == "html":
        return to_html(review_sessions(sessions))
    raise SpecplayError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")


def reviews_dir(sessions_dir: Path) -> Path:
    """Where the playground writes review pages and transcripts: beside the sessions they show."""
    return sessions_dir / "reviews"


def export_review(session_path: Path, fmt: str, folder: Path) -> Path:
    """One saved session as a document named after it in `folder`; returns its path."""
    text = export_sessions([load_session(session_path)], fmt)
    name = session_path.name.removesuffix(".jsonl") + f".{fmt}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise SpecplayError(f"cannot write reviews to {folder}: {why}; check the sessions folder") from None
    return write_output(folder / name, text, fix="check the sessions folder")
