"""A saved session opened in the playground, read-only: read from its file here, shown by the
controller (`PlaygroundController.open_session`), and described in the status line."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specplay.engine.events import Event, RoundEvent, StepEvent
from specplay.engine.settings import AUTO_ROUTE, RESERVED_ROUTES, SpecSettings
from specplay.errors import SpecplayError, error_line
from specplay.store import LaneRecord, Session, load_session
from specplay.store.changes import skipped_changes
from specplay.ui.protocols import LaneItem

if TYPE_CHECKING:
    from specplay.ui.controller import PlaygroundController


def open_saved(playground: PlaygroundController, path: Path) -> None:
    """Read the session at `path` and show it; an unreadable file is one line in the status line."""
    try:
        session = load_session(path)
    except SpecplayError as error:
        playground.set_status(error_line(error), error=True)
        return
    playground.open_session(session)


def opened_status(session: Session) -> tuple[str, bool]:
    """An opened session in the status line, and whether it is faulty: read-only, and the first of
    its live changes that cannot be applied (a newer specplay's setting, or an edit), which the
    tape shows and the replay skips."""
    complete = "" if session.complete else " (incomplete)"
    turns = f", a conversation of {len(session.turns)} turns" if len(session.turns) > 1 else ""
    skipped = skipped_changes(lane for turn in session.turns for lane in turn.lanes.values())
    more = f", and {len(skipped) - 1} more" if len(skipped) > 1 else ""
    note = f" ({skipped[0]}{more}; a newer specplay wrote it, or the file was edited)" if skipped else ""
    return f"session {session.id}{complete}{turns}, read-only{note}", bool(skipped)


def opened_items(
    records: Mapping[str, LaneRecord], lanes: Sequence[str], run_id: int, decode: Callable[[int], str]
) -> Iterator[LaneItem]:
    """One turn's events (`records`, each lane's), lane by lane, as a run would have queued them
    (each with its lane's time so far in the turn, and a round's drafted texts)."""
    for lane in lanes:
        busy_s = 0.0
        for event in records[lane].events if lane in records else ():
            busy_s += event_seconds(event)
            drafted = tuple(map(decode, event.drafted)) if isinstance(event, RoundEvent) else ()
            yield LaneItem(run_id, lane, event, busy_s, drafted)


def opened_settings(session: Session, drafters: Sequence[str], seed: int) -> tuple[SpecSettings, int]:
    """The settings and seed that re-run the session on the drafters loaded now (a drafter it
    named that is not among them: auto routes instead)."""
    settings = session.main.settings
    if settings.route not in RESERVED_ROUTES and settings.route not in drafters:
        settings = settings.changed(route=AUTO_ROUTE)
    return settings, int((session.header.get("request") or {}).get("seed", seed))


def event_seconds(event: Event) -> float:
    """The lane time an event accounts for, as recorded (sessions keep no lane clock)."""
    if isinstance(event, RoundEvent):
        return (event.draft_ms + event.verify_ms + event.overhead_ms) / 1000
    if isinstance(event, StepEvent):
        return event.step_ms / 1000
    return 0.0
