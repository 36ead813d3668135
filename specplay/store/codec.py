"""The session record, both ways: the header, engine events, the request record and token texts,
to JSON records and back.

Events hold plain values, so a record's data is `dataclasses.asdict` of its event (built by
`plain`, without asdict's deep copies). Reading rebuilds the frozen event through its declared
types (schema.py): fields a newer specplay added are dropped, fields an older one lacked take
their defaults, and anything of the wrong shape is a SchemaError that names the field.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from specplay import __version__
from specplay.config.capabilities import MLX, VLLM_INSPECTION, vllm_native
from specplay.config.numbers import COUNT_MAX, SEED_MAX
from specplay.config.run_config import RequestConfig
from specplay.engine.capabilities import Capabilities
from specplay.engine.events import (
    Candidate,
    ControlEvent,
    DoneEvent,
    Event,
    RecolourEvent,
    RoundEvent,
    StartEvent,
    StepEvent,
)
from specplay.engine.layout import chain, is_layout
from specplay.engine.settings import K_LIMIT, NODES_LIMIT
from specplay.store.schema import SchemaError, build

SCHEMA_VERSION = 1

TOKEN_ID_LIMIT = 2**31
"""Token ids a session may hold are below this: no vocabulary is larger, and a tokenizer's decode
overflows past 2**32 (sessions do not record their vocabulary, so a sane bound stands in for it)."""

KINDS: dict[type, str] = {
    StartEvent: "start",
    ControlEvent: "control",
    RoundEvent: "round",
    StepEvent: "step",
    RecolourEvent: "recolour",
    DoneEvent: "done",
}


_ATOMS = frozenset((str, int, float, bool, type(None)))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def plain(value: Any) -> Any:
    """`dataclasses.asdict(value)` for events, without its deep copy of every value: immutable ones
    are shared (a session writes an event per round, in the playground on the UI thread)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is tuple or kind is list:
        return kind([plain(item) for item in value])
    if kind is dict:
        return {plain(key): plain(item) for key, item in value.items()}
    if is_dataclass(value):
        return {name: plain(getattr(value, name)) for name in _field_names(kind)}
    return copy.deepcopy(value)


FILED_DRAFTER = "route"
"""How session files name the drafter a lane started with, a round used or a counterfactual
judged: the events' `drafter`, filed under the word sessions have always used (one name in the
code for the drafter, another for the route setting; the files unchanged)."""


def event_record(lane: str, event: Event) -> dict[str, Any]:
    data = filed(plain(event))
    if data.get("counterfactuals"):
        data["counterfactuals"] = [filed(item) for item in data["counterfactuals"]]
    if isinstance(event, RoundEvent):  # the draft's size by name, for readers of the file (derived: not read back)
        data |= {"nodes": event.nodes, "depth": event.depth}
    return {"type": "event", "lane": lane, "kind": KINDS[type(event)], "data": data}


def filed(record: dict[str, Any]) -> dict[str, Any]:
    """An event's (or a counterfactual's) fields as files and `run --json` name them."""
    if "drafter" not in record:
        return record
    return {(FILED_DRAFTER if key == "drafter" else key): value for key, value in record.items()}


def _read_drafter(record: Any) -> Any:
    """A filed record with its drafter under the events' name."""
    if isinstance(record, dict) and FILED_DRAFTER in record and "drafter" not in record:
        return {("drafter" if key == FILED_DRAFTER else key): value for key, value in record.items()}
    return record


_CLASSES = {kind: cls for cls, kind in KINDS.items()}


@dataclass(frozen=True)
class VllmAccount:
    """A vLLM inspection generation's own account (backends/vllm/generation.py)."""

    verify_strategies: dict[str, int] = field(default_factory=dict)
    approximate: bool = False
    exact_correction: dict[str, int] | None = None


@dataclass(frozen=True)
class ServerAccount:
    """What a speculating vLLM server said of a native run (backends/vllm/native_stream.py)."""

    sources_exact: bool = False
    counters_contaminated: bool = False
    k: int | None = None
    speculative_decoding: dict[str, Any] | None = None
    counters_delta: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CounterfactualRecord:
    """One drafter's line of a run's counterfactual routes (engine/metrics.py)."""

    mean_acceptance_length: float
    accepted_length_per_round: tuple[int, ...]


@dataclass(frozen=True)
class RouteShareRecord:
    """One drafter's share of a run's rounds (engine/metrics.py)."""

    rounds: int
    mean_acceptance_length: float | None


@dataclass(frozen=True)
class MetricsRecord:
    """The shape of a DoneEvent's metrics (engine/metrics.py) that readers rely on."""

    num_tokens: int = 0
    tokens_per_s: float | None = None
    time_to_first_token_ms: float | None = None
    num_tokens_by_source: dict[str, int] = field(default_factory=dict)
    num_spec_steps: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_draft_tokens: int | None = None
    num_judged_draft_tokens: int | None = None
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    acceptance_per_position: tuple[float, ...] | None = None
    num_drafted_per_position: tuple[int, ...] | None = None
    num_accepted_per_position: tuple[int, ...] | None = None
    tv_spent: float | None = None
    rejection_rank_histogram: dict[str, int] | None = None
    second_branch_share: float | None = None
    draft_ms: float | None = None
    verify_ms: float | None = None
    overhead_ms: float | None = None
    rounds_by_route: dict[str, RouteShareRecord] | None = None
    route_switches: int | None = None
    catch_up_ms: float | None = None
    catch_up_tokens: int | None = None
    counterfactual: dict[str, CounterfactualRecord] | None = None
    route_regret: float | None = None
    counterfactual_rounds: tuple[int, ...] | None = None
    counterfactual_ms: float | None = None
    vllm: VllmAccount | None = None
    server: ServerAccount | None = None


_RENAMED_SOURCES = {"budget": "relaxed"}
"""Token sources and outcomes older sessions spelt otherwise."""


def _renamed(value: Any) -> Any:
    return _RENAMED_SOURCES.get(value, value) if isinstance(value, str) else value


def upgrade(kind: str, data: Any) -> Any:
    """An event record of an older session in today's shape: tokens kept by a relaxed rule were
    "budget", and mentored decoding's TV budget sat beside the rule rather than among its knobs."""
    if not isinstance(data, dict):
        return data
    data = dict(_read_drafter(data)) if kind in ("start", "round", "step") else dict(data)
    if kind == "round" and isinstance(counterfactuals := data.get("counterfactuals"), list):
        data["counterfactuals"] = [_read_drafter(item) for item in counterfactuals]
    if kind == "round":
        data = _with_layout(data)
    if kind == "start" and isinstance(settings := data.get("settings"), dict) and "tv_budget" in settings:
        settings = dict(settings)
        params = settings.get("rule_params")
        params = dict(params) if isinstance(params, dict) else {}
        params.setdefault("tv_budget", settings.pop("tv_budget"))
        data["settings"] = settings | {"rule_params": params}
    if kind == "round":
        for name, key in (("tokens", "source"), ("positions", "outcome")):
            if isinstance(items := data.get(name), list):
                data[name] = [
                    {**item, key: _renamed(item.get(key))} if isinstance(item, dict) else item for item in items
                ]
    if kind == "step" and isinstance(token := data.get("token"), dict):
        data["token"] = {**token, "source": _renamed(token.get("source"))}
    if kind == "recolour" and isinstance(sources := data.get("sources"), list):
        data["sources"] = [_renamed(source) for source in sources]
    if kind == "done" and isinstance(metrics := data.get("metrics"), dict):
        by_source = metrics.get("num_tokens_by_source")
        if isinstance(by_source, dict):
            data["metrics"] = metrics | {"num_tokens_by_source": {_renamed(k): v for k, v in by_source.items()}}
    return data


def _with_layout(data: dict[str, Any]) -> dict[str, Any]:
    """A round record with its draft's layout: sessions written before every round was a tree
    (parents null, `k` the drafted count) read as chains. `nodes` and `depth` are written for
    readers of the file and derived again here."""
    data = {key: value for key, value in data.items() if key not in ("nodes", "depth")}
    k = data.pop("k", None)
    if data.get("parents") is None:
        drafted = data.get("drafted")
        known = isinstance(k, int) and not isinstance(k, bool)
        count = k if known else len(drafted) if isinstance(drafted, list) else 0
        data["parents"] = list(chain(min(max(count, 0), NODES_LIMIT + 1)))  # a larger count is refused below
    return data


_NODE_LISTS = ("parents", "drafted", "positions")
"""A round's lists with one entry per drafted node."""
_POSITION_METRICS = ("acceptance_per_position", "num_drafted_per_position", "num_accepted_per_position")
"""A run's metrics with one entry per draft position, up to the deepest draft."""


def _check_sizes(kind: str, data: Any, where: str) -> None:
    """Lists no run makes longer than a draft, refused before they are built: a list of millions
    takes seconds and a multiple of its size to build, and its length drives what reads it."""
    if not isinstance(data, dict):
        return
    if kind == "round":
        for name in _NODE_LISTS:
            if isinstance(items := data.get(name), list) and len(items) > NODES_LIMIT:
                raise SchemaError(
                    f"{where} (round).{name} holds {len(items)} nodes, more than a round drafts ({NODES_LIMIT})"
                )
    if kind == "done" and isinstance(metrics := data.get("metrics"), dict):
        for name in _POSITION_METRICS:
            if isinstance(items := metrics.get(name), list) and len(items) > K_LIMIT:
                raise SchemaError(
                    f"{where} (done).metrics.{name} holds {len(items)} positions, more than a draft has ({K_LIMIT})"
                )


def _check_count(value: int | None, most: int, field: str, what: str) -> None:
    if value is not None and not 0 <= value <= most:
        raise SchemaError(f"{field} is {value}, not 0 to {what} ({most})")


def _check_round(event: RoundEvent, where: str) -> None:
    """A round's draft as a run can make it: a layout within the node limit, each drafted node
    (where the tokens are known) with its position; its counts within what a run counts."""
    nodes = len(event.parents)
    if nodes > NODES_LIMIT:
        raise SchemaError(f"{where} (round).parents holds {nodes} nodes, more than a round drafts ({NODES_LIMIT})")
    if not is_layout(event.parents, nodes):
        raise SchemaError(f"{where} (round).parents is no tree: each parent is -1 or an earlier node")
    if event.drafted and len(event.drafted) != nodes:
        raise SchemaError(f"{where} (round).drafted holds {len(event.drafted)} tokens for {nodes} nodes")
    if len(event.positions) not in (0, len(event.drafted)):
        raise SchemaError(f"{where} (round).positions holds {len(event.positions)} for {len(event.drafted)} drafted")
    if not 0 <= event.num_accepted <= event.depth:
        raise SchemaError(f"{where} (round).num_accepted is {event.num_accepted}, not 0 to its depth {event.depth}")
    _check_count(event.k_asked, K_LIMIT, f"{where} (round).k_asked", "a draft's most")
    for name in ("index", "token_index", "catch_up_tokens"):
        _check_count(getattr(event, name), COUNT_MAX, f"{where} (round).{name}", "a run's most tokens")
    for i, counterfactual in enumerate(event.counterfactuals):
        if len(counterfactual.drafted) > K_LIMIT:
            raise SchemaError(
                f"{where} (round).counterfactuals[{i}].drafted holds {len(counterfactual.drafted)} tokens, "
                f"more than a draft has ({K_LIMIT})"
            )


def _listed(field: str, token_ids: Sequence[int]) -> Iterator[tuple[str, int]]:
    return ((f"{field}[{i}]", token_id) for i, token_id in enumerate(token_ids))


def _candidates(field: str, top: Sequence[Candidate] | None) -> Iterator[tuple[str, int]]:
    return ((f"{field}[{i}]", token_id) for i, (token_id, _) in enumerate(top or ()))


def _token_ids(event: Event) -> Iterator[tuple[str, int]]:
    """Every token id an event holds, each with its field: what views decode and models take."""
    if isinstance(event, RoundEvent):
        yield from _listed("drafted", event.drafted)
        for i, position in enumerate(event.positions):
            yield f"positions[{i}].token_id", position.token_id
            yield from _candidates(f"positions[{i}].top_target", position.top_target)
            yield from _candidates(f"positions[{i}].top_draft", position.top_draft)
        yield from ((f"tokens[{i}].token_id", token.token_id) for i, token in enumerate(event.tokens))
        yield from _candidates("bonus_top_target", event.bonus_top_target)
        for i, counterfactual in enumerate(event.counterfactuals):
            yield from _listed(f"counterfactuals[{i}].drafted", counterfactual.drafted)
    elif isinstance(event, StepEvent):
        yield "token.token_id", event.token.token_id
    elif isinstance(event, StartEvent):
        yield from _listed("prompt_token_ids", event.prompt_token_ids)
    elif isinstance(event, DoneEvent):
        yield from _listed("token_ids", event.token_ids)


def _check_token_ids(fields: Iterator[tuple[str, int]], where: str) -> None:
    """Ids a tokenizer can decode: a negative or vast one ends a tokenizer's decode in an OverflowError."""
    for field_name, token_id in fields:
        if not 0 <= token_id < TOKEN_ID_LIMIT:
            raise SchemaError(f"{where}{field_name} is {token_id}, not a token id (0 to {TOKEN_ID_LIMIT - 1})")


def decode_event(kind: str, data: Any, where: str = "event") -> Event | None:
    """One event record's data as the engine emitted it (None for a kind this specplay does not
    know); a SchemaError names the field when the data does not have the event's shape."""
    cls = _CLASSES.get(kind)
    if cls is None:
        return None
    data = upgrade(kind, data)
    _check_sizes(kind, data, where)
    event = build(cls, data, f"{where} ({kind})")
    if isinstance(event, DoneEvent):
        build(MetricsRecord, event.metrics, f"{where} (done).metrics")
    if isinstance(event, RoundEvent):
        _check_round(event, where)
    if isinstance(event, ControlEvent | StepEvent):
        _check_count(event.token_index, COUNT_MAX, f"{where} ({kind}).token_index", "a run's most tokens")
    _check_token_ids(_token_ids(event), f"{where} ({kind}).")
    return event


def capabilities_from_header(header: Mapping[str, Any]) -> Capabilities:
    """What the session's event stream could do. Sessions older than the record name only their
    backend, which says as much; sessions of the first record spelt one field `recolours`."""
    record = header.get("capabilities")
    if record is not None:
        if "recolours" in record:
            record = {key: value for key, value in record.items() if key != "recolours"}
            record["server_judges"] = header["capabilities"]["recolours"]
        return build(Capabilities, record, "header.capabilities")
    backend = header.get("backend") or {}
    if backend.get("backend") != "vllm":
        return MLX
    return vllm_native(baseline=True) if backend.get("mode") == "native" else VLLM_INSPECTION


def request_record(request: RequestConfig, route_map: Mapping[str, str], **about: Any) -> dict[str, Any]:
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


def request_from_record(record: Mapping[str, Any], prompt: str) -> RequestConfig:
    request = replace(build(RequestConfig, {**record, "prompt": prompt}, "header.request"), prompt=prompt)
    for name, limit in (("seed", SEED_MAX), ("max_tokens", COUNT_MAX)):  # the bounds the flags have
        if abs(getattr(request, name)) > limit:
            raise SchemaError(f"header.request.{name} is larger than {limit}")
    return request


@dataclass(frozen=True)
class ModelRecord:
    """The shape of one model's identity that readers rely on."""

    source: str = "?"
    path: str | None = None
    backend: str | None = None
    route: str | None = None
    weights_sha256: str | None = None
    weights_hash: str | None = None


@dataclass(frozen=True)
class BackendRecord:
    """The shape of what an event stream said of itself that readers rely on."""

    models: dict[str, ModelRecord] = field(default_factory=dict)
    backend: str | None = None
    mode: str | None = None


@dataclass(frozen=True)
class Header:
    """The header record's shape (the session keeps the record itself as read)."""

    schema_version: int
    prompt: str
    prompt_token_ids: tuple[int, ...]
    lanes: tuple[str, ...]
    backend: BackendRecord = field(default_factory=BackendRecord)
    request: dict[str, Any] = field(default_factory=dict)
    capabilities: Capabilities | None = None
    created: str | None = None
    specplay_version: str | None = None


def header_record(
    prompt: str,
    *,
    prompt_token_ids: list[int],
    lanes: list[str],
    backend: dict[str, Any],
    request: dict[str, Any],
    capabilities: Capabilities,
    created: str,
) -> dict[str, Any]:
    """A session's first record: the prompt, the lanes, what ran them and the request."""
    return {
        "type": "header",
        "schema_version": SCHEMA_VERSION,
        "specplay_version": __version__,
        "created": created,
        "prompt": prompt,
        "prompt_token_ids": list(prompt_token_ids),
        "lanes": lanes,
        "backend": backend,
        "capabilities": capabilities.to_record(),
        "request": request,
    }


def check_header(record: Mapping[str, Any]) -> Header:
    """The header's shape, its request record's and its route map's; a SchemaError names the field."""
    header = build(Header, record, "header")
    _check_token_ids(_listed("prompt_token_ids", header.prompt_token_ids), "header.")
    request_from_record(header.request, header.prompt)
    build(dict[str, str], header.request.get("route_map") or {}, "header.request.route_map")
    return header


def texts_record(texts: Mapping[int, str]) -> dict[str, Any]:
    """The texts of drafted and candidate tokens, as a session records them."""
    return {"type": "texts", "texts": {str(token_id): text for token_id, text in texts.items()}}


def texts_from_record(record: Mapping[str, Any]) -> dict[int, str]:
    """A texts record's pairs; entries of the wrong shape or of no token id say nothing and are skipped."""
    texts = record.get("texts")
    if not isinstance(texts, dict):
        return {}
    digits = len(str(TOKEN_ID_LIMIT))  # a longer key is no token id, and int() refuses 4,300 digits
    pairs = ((k, v) for k, v in texts.items() if k.isascii() and k.isdigit() and len(k) <= digits)
    return {token_id: v for k, v in pairs if isinstance(v, str) and (token_id := int(k)) < TOKEN_ID_LIMIT}
