"""A saved session brought back as engine events, so the playground can show it as it showed the run.

Sessions hold each event's fields as JSON; this rebuilds the frozen event objects. Fields a newer
specplay added are dropped and fields an older one lacked take their defaults, so any readable
session opens.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from specplay.engine.events import (
    ControlEvent,
    DoneEvent,
    DraftPosition,
    Event,
    RecolourEvent,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
)
from specplay.engine.settings import PolicyParams, SamplingParams, SpecSettings
from specplay.store import Session


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in names}


def _candidates(rows: list[list[Any]] | None) -> tuple[tuple[int, float], ...] | None:
    return None if rows is None else tuple((int(t), float(p)) for t, p in rows)


def _position(data: dict[str, Any]) -> DraftPosition:
    data = _known(DraftPosition, data)
    data["top_target"] = _candidates(data.get("top_target"))
    data["top_draft"] = _candidates(data.get("top_draft"))
    return DraftPosition(**data)


def event_from_record(kind: str, data: dict[str, Any]) -> Event | None:
    """One session event record as the engine emitted it (None for a kind this specplay does not know)."""
    if kind == "round":
        round_data = _known(RoundEvent, data)
        round_data["drafted"] = tuple(round_data["drafted"])
        round_data["positions"] = tuple(_position(p) for p in round_data["positions"])
        round_data["tokens"] = tuple(Token(**_known(Token, t)) for t in round_data["tokens"])
        round_data["bonus_top_target"] = _candidates(round_data.get("bonus_top_target"))
        return RoundEvent(**round_data)
    if kind == "step":
        step = _known(StepEvent, data)
        return StepEvent(**{**step, "token": Token(**_known(Token, step["token"]))})
    if kind == "recolour":
        return RecolourEvent(tuple(data["sources"]), bool(data["exact"]))
    if kind == "control":
        return ControlEvent(data["token_index"], tuple(tuple(change) for change in data["changes"]))  # type: ignore[misc]
    if kind == "done":
        done = _known(DoneEvent, data)
        return DoneEvent(**{**done, "token_ids": tuple(done["token_ids"])})
    if kind == "start":
        start = _known(StartEvent, data)
        return StartEvent(**{**start, "prompt_token_ids": tuple(start["prompt_token_ids"])})
    return None


def session_events(session: Session) -> dict[str, list[Event]]:
    """Every event of the session, per lane, in order."""
    lanes: dict[str, list[Event]] = {name: [] for name in session.header["lanes"]}
    for record in session.records[1:]:
        if record.get("type") == "event":
            event = event_from_record(record["kind"], record["data"])
            if event is not None:
                lanes.setdefault(record["lane"], []).append(event)
    return lanes


def event_seconds(event: Event) -> float:
    """The lane time an event accounts for, as recorded (sessions keep no lane clock)."""
    if isinstance(event, RoundEvent):
        return (event.draft_ms + event.verify_ms + event.overhead_ms) / 1000
    if isinstance(event, StepEvent):
        return event.step_ms / 1000
    return 0.0


def settings_from(data: dict[str, Any]) -> SpecSettings:
    """The SpecSettings a session's start event recorded (a missing field keeps its default)."""
    sampling = SamplingParams(**_known(SamplingParams, data.get("sampling", {})))
    policy = PolicyParams(**_known(PolicyParams, data.get("policy_params", {})))
    plain = _known(SpecSettings, data)
    return SpecSettings(**{**plain, "sampling": sampling, "policy_params": policy})
