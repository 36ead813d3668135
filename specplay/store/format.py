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
    {"type": "texts", "texts": {"token id": text, ...}}   (drafted and candidate tokens, where known)
    {"type": "turn", "turn": 1, "prompt": ..., "route_choice": {...}}   (a conversation's next turn: the
     events after it answer it; route_choice, where the route setting chose per prompt: the turn's)
    {"type": "end"}

A session is a conversation of one turn or more; the header holds the first turn's prompt, and
each lane answers every turn after its own earlier answers.

Readers skip record types they do not know, so a newer specplay may add some.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specplay.engine.capabilities import Capabilities
from specplay.engine.events import (
    ControlEvent,
    DoneEvent,
    Event,
    RecolourEvent,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
)
from specplay.engine.settings import SpecSettings
from specplay.engine.speedup import measured_speedup
from specplay.errors import SpecplayError
from specplay.files.inputs import SESSION_LIMIT, read_input
from specplay.files.json_text import JsonError, parse_json
from specplay.store.codec import SCHEMA_VERSION, capabilities_from_header, check_header, decode_event, texts_from_record
from specplay.store.schema import SchemaError

SUFFIX = ".jsonl"


class SessionError(SpecplayError):
    """A session file that cannot be read: missing, corrupt, or from a newer specplay."""


@dataclass
class LaneRecord:
    """One lane's events, collected: what a session holds of it, or what a run printed."""

    name: str
    start: StartEvent | None = None
    tokens: list[Token] = field(default_factory=list)
    rounds: list[RoundEvent] = field(default_factory=list)
    changes: list[ControlEvent] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    """Every event, in order."""
    done: DoneEvent | None = None

    @property
    def complete(self) -> bool:
        return self.done is not None

    @property
    def token_ids(self) -> list[int]:
        return [t.token_id for t in self.tokens]

    @property
    def texts(self) -> list[str]:
        return [t.text for t in self.tokens]

    @property
    def sources(self) -> list[str]:
        return [t.source for t in self.tokens]

    @property
    def text(self) -> str:
        return self.done.text if self.done else "".join(self.texts)

    @property
    def settings(self) -> SpecSettings:
        return self.start.settings if self.start else SpecSettings()

    @property
    def metrics(self) -> dict[str, Any]:
        return self.done.metrics if self.done else {}

    @property
    def route_switches(self) -> dict[int, str]:
        """Token index → drafter, where a round's drafter differs from the round's before (adaptive
        routing, or a live route change): what a reader of the text is shown."""
        switches, previous = {}, None
        for event in self.rounds:
            if previous is not None and event.drafter != previous and event.tokens:
                switches[event.token_index] = event.drafter
            previous = event.drafter
        return switches

    def add(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, StartEvent):
            self.start = event
        elif isinstance(event, RoundEvent):
            self.rounds.append(event)
            self.tokens.extend(event.tokens)
        elif isinstance(event, StepEvent):
            self.tokens.append(event.token)
        elif isinstance(event, ControlEvent):
            self.changes.append(event)
        elif isinstance(event, RecolourEvent):  # a remote speculator's exact sources replace the streamed guess
            recoloured = [replace(t, source=s) for t, s in zip(self.tokens, event.sources, strict=False)]
            self.tokens[: len(recoloured)] = recoloured
        elif isinstance(event, DoneEvent):
            self.done = event


@dataclass
class TurnRecord:
    """One turn of a conversation: the user's prompt and each lane's answer to it."""

    index: int
    prompt: str
    lanes: dict[str, LaneRecord]
    """In the header's order: the run's lane first."""
    route_choice: dict[str, Any] | None = None
    """Where `--route auto` (or adaptive) sent the turn's prompt and why (`RouteChoice.record()`),
    as the run recorded it: the first turn's in the header's request, a later turn's in its turn
    record. None where none was recorded (another route, or a session older than the record).
    Read as written: its fields may hold anything (`route_text` reads one)."""

    def route_text(self, field: str) -> str | None:
        """A text field of the turn's route choice ("why", "drafter", "chosen_by", "deferred")."""
        value = (self.route_choice or {}).get(field)
        return value if isinstance(value, str) else None

    @property
    def main(self) -> LaneRecord:
        """The lane the run was about: the first one."""
        return next(iter(self.lanes.values()))

    @property
    def baseline(self) -> LaneRecord | None:
        """The target-only lane run beside a speculative one, if any."""
        lane = self.lanes.get("target")
        return lane if lane is not None and lane is not self.main else None


@dataclass
class Session:
    path: Path
    header: dict[str, Any]
    turns: list[TurnRecord]
    """The conversation's turns, in order; a session of one prompt has one."""
    records: list[dict[str, Any]]
    """Every record as read, header first: the raw event log."""
    complete: bool

    @property
    def lanes(self) -> dict[str, LaneRecord]:
        """The first turn's lanes: the run, for a session of one prompt."""
        return self.turns[0].lanes

    @property
    def id(self) -> str:
        return self.path.name.removesuffix(SUFFIX)

    @property
    def prompt(self) -> str:
        return self.header["prompt"]

    @property
    def token_texts(self) -> dict[int, str]:
        """The text of every token the session names that it knows: committed tokens' own texts and
        the drafted and candidate tokens' texts the writer recorded."""
        texts: dict[int, str] = {}
        for lane in (lane for turn in self.turns for lane in turn.lanes.values()):
            texts.update((t.token_id, t.text) for t in lane.tokens if t.text)
        for record in self.records:
            if record["type"] == "texts":
                texts.update(texts_from_record(record))
        return texts

    @property
    def capabilities(self) -> Capabilities:
        return capabilities_from_header(self.header)

    @property
    def main(self) -> LaneRecord:
        """The first turn's lane the run was about."""
        return self.turns[0].main

    @property
    def main_lanes(self) -> list[LaneRecord]:
        """The main lane of every turn, in order: what a reader of the whole conversation reads."""
        return [turn.main for turn in self.turns]

    @property
    def measured_speedup(self) -> float | None:
        """The first turn's speedup (`speedup_of`)."""
        return self.speedup_of(self.turns[0])

    def speedup_of(self, turn: TurnRecord) -> float | None:
        """The turn's main lane's tokens/s over its target-only lane's, where the run's wall time
        was a speed."""
        if turn.baseline is None or not self.capabilities.wall_time_is_speed:
            return None
        return measured_speedup(turn.main.metrics.get("tokens_per_s"), turn.baseline.metrics.get("tokens_per_s"))

    @property
    def baseline(self) -> LaneRecord | None:
        """The first turn's target-only lane run beside a speculative one, if any."""
        return self.turns[0].baseline


def _parse_line(path: Path, number: int, line: str, last: bool) -> dict[str, Any] | None:
    try:
        record = parse_json(line, f"line {number}")
    except JsonError as error:
        if last and not error.deep:  # torn by a kill mid-write: the run is incomplete, the rest is good
            return None
        cause = "" if error.deep else " (edited or damaged)"
        raise SessionError(f"session {path} is corrupt: {error}{cause}") from None
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise SessionError(f"session {path} is corrupt: line {number} is not a session record")
    return record


def _choice(record: dict[str, Any]) -> dict[str, Any] | None:
    """The route choice a request or turn record holds, where it holds one."""
    choice = record.get("route_choice")
    return choice if isinstance(choice, dict) else None


def load_session(path: Path) -> Session:
    """A session file, checked record by record; any damage is one SessionError naming the file
    and the record."""
    if not path.exists():
        raise SessionError(f"session {path} does not exist; `specplay sessions` lists the saved ones")
    try:
        text = read_input(path, "session", SESSION_LIMIT, fix="it is not one specplay wrote").decode("utf-8")
    except SpecplayError as error:
        raise SessionError(str(error)) from None
    except UnicodeDecodeError as exc:
        raise SessionError(f"session {path} cannot be read: {exc}") from None
    # Records end at "\n" only: the writer escapes every other Unicode line boundary.
    lines = text.split("\n")
    if lines and not lines[-1].strip():
        lines.pop()
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
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise SessionError(
            f"session {path} has schema version {version}, newer than this specplay reads ({SCHEMA_VERSION}); "
            "upgrade specplay to open it"
        )
    try:
        checked = check_header(header)
    except SchemaError as error:
        raise SessionError(f"session {path} is corrupt: {error}") from None
    names = checked.lanes
    if not names:
        raise SessionError(f"session {path} is corrupt: its header names no lanes")
    first = TurnRecord(0, checked.prompt, {name: LaneRecord(name) for name in names}, _choice(checked.request))
    turns = [first]
    lanes = turns[0].lanes
    complete = False
    for number, record in enumerate(records[1:], 2):
        if record["type"] == "turn":
            prompt = record.get("prompt")
            if not isinstance(prompt, str) or record.get("turn") != len(turns):
                raise SessionError(f"session {path} is corrupt: record {number} is not turn {len(turns)} with a prompt")
            turns.append(TurnRecord(len(turns), prompt, {name: LaneRecord(name) for name in names}, _choice(record)))
            lanes = turns[-1].lanes
        elif record["type"] == "event":
            lane = record.get("lane")
            if not isinstance(lane, str):
                raise SessionError(f"session {path} is corrupt: record {number} names no lane")
            try:
                event = decode_event(str(record.get("kind")), record.get("data"), f"record {number}")
            except SchemaError as error:
                raise SessionError(f"session {path} is corrupt: {error}") from None
            if event is not None:
                lanes.setdefault(lane, LaneRecord(lane)).add(event)
        elif record["type"] == "end":
            complete = True
    finished = all(lane.complete for turn in turns for lane in turn.lanes.values())
    return Session(path, header, turns, records, complete and finished)
