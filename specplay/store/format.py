"""The session file format, version 1, and its reader.

A session is a JSON Lines file. The first record is the header (prompt, models, request); then
one record per engine event, tagged with its lane ("speculative", "target" or "draft"); a
finished session ends with an "end" record. A file without one is a run that was cut short: it
reads as incomplete, and a last line torn by a kill is ignored.

    {"type": "header", "schema_version": 1, "specplay_version": ..., "created": ..., "prompt": ...,
     "prompt_token_ids": [...], "backend": {...}, "request": {...}, "lanes": ["speculative", "target"]}
    {"type": "event", "lane": "speculative", "kind": "start" | "control" | "round" | "step" | "done",
     "data": {...}}
    ("recolour": vLLM's native mode, the server's exact sources for the tokens streamed so far)
    {"type": "end"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplay.errors import SpecplayError

SCHEMA_VERSION = 1
SUFFIX = ".jsonl"


class SessionError(SpecplayError):
    """A session file that cannot be read: missing, corrupt, or from a newer specplay."""


@dataclass
class LaneRecord:
    """One lane of a session, rebuilt from its events."""

    name: str
    start: dict[str, Any] = field(default_factory=dict)
    token_ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return self.done is not None

    @property
    def text(self) -> str:
        return self.done["text"] if self.done else "".join(self.texts)

    @property
    def settings(self) -> dict[str, Any]:
        return self.start.get("settings", {})

    @property
    def metrics(self) -> dict[str, Any]:
        return self.done["metrics"] if self.done else {}

    def add(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            self.start = data
        elif kind == "round":
            self.rounds.append(data)
            for token in data["tokens"]:
                self._add_token(token)
        elif kind == "step":
            self._add_token(data["token"])
        elif kind == "control":
            self.changes.append(data)
        elif kind == "recolour":  # a remote speculator's exact sources replace the streamed guess
            self.sources = list(data["sources"])[: len(self.token_ids)]
        elif kind == "done":
            self.done = data

    def _add_token(self, token: dict[str, Any]) -> None:
        self.token_ids.append(token["token_id"])
        self.texts.append(token["text"])
        self.sources.append(token["source"])


@dataclass
class Session:
    path: Path
    header: dict[str, Any]
    lanes: dict[str, LaneRecord]
    records: list[dict[str, Any]]
    """Every record as read, header first: the raw event log."""
    complete: bool

    @property
    def id(self) -> str:
        return self.path.name.removesuffix(SUFFIX)

    @property
    def prompt(self) -> str:
        return self.header["prompt"]

    @property
    def main(self) -> LaneRecord:
        """The lane the run was about: the first one."""
        return self.lanes[self.header["lanes"][0]]

    @property
    def baseline(self) -> LaneRecord | None:
        """The target-only lane run beside a speculative one, if any."""
        lane = self.lanes.get("target")
        return lane if lane is not None and lane is not self.main else None


def _parse_line(path: Path, number: int, line: str, last: bool) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        if last:  # torn by a kill mid-write: the run is incomplete, the rest is good
            return None
        raise SessionError(f"session {path} is corrupt: line {number} is not JSON (edited or damaged)") from None
    if not isinstance(record, dict) or "type" not in record:
        raise SessionError(f"session {path} is corrupt: line {number} is not a session record")
    return record


def load_session(path: Path) -> Session:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SessionError(f"session {path} does not exist; `specplay sessions` lists the saved ones") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SessionError(f"session {path} cannot be read: {exc}") from None
    lines = text.splitlines()
    if not lines:
        raise SessionError(f"session {path} is empty; it was cut short before its header was written")
    records = []
    for number, line in enumerate(lines, 1):
        record = _parse_line(path, number, line, last=number == len(lines))
        if record is not None:
            records.append(record)
    header = records[0] if records else {}
    if header.get("type") != "header":
        raise SessionError(f"session {path} is corrupt: it does not start with a header")
    version = header.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise SessionError(
            f"session {path} has schema version {version}, newer than this specplay reads ({SCHEMA_VERSION}); "
            "upgrade specplay to open it"
        )
    names = header.get("lanes")
    if not isinstance(names, list) or not names:
        raise SessionError(f"session {path} is corrupt: its header names no lanes")
    lanes = {name: LaneRecord(name) for name in names}
    complete = False
    try:
        for record in records[1:]:
            if record["type"] == "event":
                lanes.setdefault(record["lane"], LaneRecord(record["lane"])).add(record["kind"], record["data"])
            elif record["type"] == "end":
                complete = True
    except (KeyError, TypeError) as exc:
        raise SessionError(f"session {path} is corrupt: a record lacks {exc}") from None
    return Session(path, header, lanes, records, complete and all(lane.complete for lane in lanes.values()))
