"""The session record, both ways: engine events to JSON records and back, and the request record.

Events hold plain values, so a record's data is `dataclasses.asdict` of its event. Reading
rebuilds the frozen event: fields a newer specplay added are dropped, fields an older one lacked
take their defaults, so any readable session decodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from specplay.config.run import RequestSpec
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

KINDS: dict[type, str] = {
    StartEvent: "start",
    ControlEvent: "control",
    RoundEvent: "round",
    StepEvent: "step",
    RecolourEvent: "recolour",
    DoneEvent: "done",
}


def event_record(lane: str, event: Event) -> dict[str, Any]:
    return {"type": "event", "lane": lane, "kind": KINDS[type(event)], "data": asdict(event)}


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in names}


def _candidates(rows: list[list[Any]] | None) -> tuple[tuple[int, float], ...] | None:
    return None if rows is None else tuple((int(t), float(p)) for t, p in rows)


def _token(data: Mapping[str, Any]) -> Token:
    return Token(**_known(Token, data))


def _position(data: Mapping[str, Any]) -> DraftPosition:
    known = _known(DraftPosition, data)
    known["top_target"] = _candidates(known.get("top_target"))
    known["top_draft"] = _candidates(known.get("top_draft"))
    return DraftPosition(**known)


def decode_event(kind: str, data: Mapping[str, Any]) -> Event | None:
    """One event record's data as the engine emitted it (None for a kind this specplay does not know).
    A record of the wrong shape raises KeyError, TypeError or ValueError: the reader names it."""
    if kind == "round":
        known = _known(RoundEvent, data)
        known["drafted"] = tuple(int(t) for t in known["drafted"])
        known["positions"] = tuple(_position(p) for p in known["positions"])
        known["tokens"] = tuple(_token(t) for t in known["tokens"])
        known["bonus_top_target"] = _candidates(known.get("bonus_top_target"))
        return RoundEvent(**known)
    if kind == "step":
        known = _known(StepEvent, data)
        return StepEvent(**{**known, "token": _token(known["token"])})
    if kind == "recolour":
        return RecolourEvent(tuple(data["sources"]), bool(data["exact"]))
    if kind == "control":
        changes = tuple((str(name), old, new) for name, old, new in data["changes"])
        return ControlEvent(int(data["token_index"]), changes)
    if kind == "done":
        known = _known(DoneEvent, data)
        return DoneEvent(**{**known, "token_ids": tuple(int(t) for t in known["token_ids"])})
    if kind == "start":
        known = _known(StartEvent, data)
        settings = settings_from_record(known.get("settings") or {})
        return StartEvent(**{**known, "prompt_token_ids": tuple(known["prompt_token_ids"]), "settings": settings})
    return None


def settings_from_record(data: Mapping[str, Any]) -> SpecSettings:
    """The SpecSettings a start event recorded (a missing field keeps its default)."""
    sampling = SamplingParams(**_known(SamplingParams, data.get("sampling") or {}))
    policy = PolicyParams(**_known(PolicyParams, data.get("policy_params") or {}))
    return SpecSettings(**{**_known(SpecSettings, data), "sampling": sampling, "policy_params": policy})


def request_record(request: RequestSpec, route_map: Mapping[str, str], **about: Any) -> dict[str, Any]:
    """What a session records of its request (the prompt is in the header); `about` adds where it
    ran (the playground marks its lanes as run side by side)."""
    return {
        "mode": request.mode,
        "seed": request.seed,
        "max_tokens": request.max_tokens,
        "ignore_eos": request.ignore_eos,
        "raw": request.raw,
        "route_map": dict(route_map),
        **about,
    }


def request_from_record(record: Mapping[str, Any], prompt: str) -> RequestSpec:
    known = _known(RequestSpec, record)
    return RequestSpec(**{**known, "prompt": prompt})
