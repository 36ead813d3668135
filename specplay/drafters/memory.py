"""Earlier outputs a drafter may remember: what this machine's sessions hold of the target's text.

A kind that learns from earlier outputs says how many tokens it wants (`DrafterKind.recalls`); the
command reads them once as it starts, from the sessions folder it uses (store/recall.py), newest
first, within a time and size bound, and the backend hands them to the kind as it loads the
drafter (`DrafterKind.proposers`). Only the outputs of the run's own target are read: token ids
mean nothing under another tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class EarlierOutput:
    """One lane's answer to one turn of a saved session."""

    token_ids: tuple[int, ...]
    where: str
    """Which session and turn, as a drill-down names it ("session 20261206-101500-e13dce, turn 2")."""


@dataclass(frozen=True, slots=True)
class EarlierOutputs:
    """What the command read for the drafters that remember, and what it left out."""

    folder: Path
    outputs: tuple[EarlierOutput, ...]
    """Oldest first; together at most the tokens asked for (the newest kept)."""
    sessions: int
    """Session files that gave outputs."""
    skipped: int = 0
    """Files that could not be read (damaged, cut short before their header, too large): left
    out quietly, counted here."""
    other_targets: int = 0
    """Sessions of another target (its tokens would mean other words), left out."""
    stopped: str | None = None
    """Why it stopped before the oldest session (a bound it reached); None where it read them all
    or had its tokens."""
    elapsed_s: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(len(output.token_ids) for output in self.outputs)

    def describe(self) -> str:
        """What was read, in one line: "read 12,345 tokens of 40 earlier outputs from 20 sessions
        in sessions (0.12 s; 2 unreadable files skipped)"."""
        count = len(self.outputs)
        what = (
            f"read {self.tokens:,} tokens of {count} earlier output{_s(count)} from {self.sessions} "
            f"session{_s(self.sessions)} in {self.folder}"
            if count
            else f"found no earlier outputs of this target in {self.folder}"
        )
        left_out = [
            f"{self.skipped} unreadable file{_s(self.skipped)} skipped" if self.skipped else "",
            f"{self.other_targets} session{_s(self.other_targets)} of another target left out"
            if self.other_targets
            else "",
            f"stopped at {self.stopped}" if self.stopped else "",
        ]
        return f"{what} ({'; '.join([f'{self.elapsed_s:.2f} s', *(part for part in left_out if part)])})"


def _s(count: int) -> str:
    return "" if count == 1 else "s"
