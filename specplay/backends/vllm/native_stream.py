"""Native mode as the engine's event stream, so the playground and saved sessions show it as
they show any run.

The server speculates with its own drafter and k; specplay only watches. Each streamed chunk
becomes one round: its first token (the very first from prefill, the target's alone) and the
chunk-size guess of accepted and corrected or bonus tokens (a guess, since chunks merge when the
client lags). When the server sends its per-step arrays with the last chunk, a RecolourEvent
replaces the guess with its exact account. Nothing in a round claims a probability: native mode
reports none. A plain server of the same target, read the same way, gives the target-only lane.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.connect import PROBE_TEXT, check_same_tokens, tokenize
from specplay.backends.vllm.detok import RemoteTokenizer
from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.native import (
    PER_POSITION,
    RUNNING,
    NativeServer,
    chunk_guess,
    counter_delta,
    parse_prometheus,
    recolour,
    speculative_metrics,
)
from specplay.backends.vllm.protocol import completion_body, stream_choices
from specplay.backends.vllm.remote import RemoteModel
from specplay.backends.vllm.vllm_backend import VllmBackend, connect_vllm_backend
from specplay.config.capabilities import NATIVE_FIXED, vllm_native
from specplay.config.run_config import NATIVE_ROUTE
from specplay.config.urls import server_root
from specplay.engine.conversation import Exchange
from specplay.engine.events import (
    DoneEvent,
    Event,
    FinishReason,
    RecolourEvent,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
    TokenSource,
)
from specplay.engine.layout import chain
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import check_context
from specplay.engine.metrics import Metrics
from specplay.engine.request import Request
from specplay.engine.routers.routing import Routing, resolve_route, routing_for
from specplay.engine.settings import K_LIMIT, SpecSettings
from specplay.engine.stream import Clock
from specplay.errors import ConfigError


def chunk_texts(tokenizer: RemoteTokenizer, token_ids: list[int], text: str) -> list[str]:
    """Each token's share of a chunk's text: single-token decodes when they add up to the text
    the server sent, else the whole text on the chunk's last token (a character split across
    tokens, or a tokenizer that merges on decode)."""
    if len(token_ids) == 1:
        return [text]  # the server's incremental detokenizer already holds back partial characters
    pieces = [tokenizer.decode([token]) for token in token_ids]
    if "".join(pieces) == text:
        return pieces
    return [""] * (len(token_ids) - 1) + [text]


@dataclass
class _Chunk:
    """One streamed chunk as the lanes use it."""

    arrived_s: float
    """When it was read, before any work on it: the lanes' times are the servers' streaming."""
    token_ids: list[int]
    texts: list[str]


@dataclass
class _Stream:
    """What a finished (or stopped) stream said besides its tokens."""

    finish: FinishReason = "length"
    speculative_decoding: dict[str, Any] = field(default_factory=dict)
    """The server's metrics.speculative_decoding, when it sends them."""


def _read(
    model: RemoteModel,
    tokenizer: RemoteTokenizer,
    request: Request,
    settings: SpecSettings,
    controls: LiveControls,
    clock: Clock,
    ended: _Stream,
) -> Iterator[_Chunk]:
    """A streamed completion's chunks; `ended` is filled in as the stream says how it ended. Text
    comes from the server (per token from single-token decodes only where a chunk holds several),
    so no request per token slows the reading and skews the times."""
    body = completion_body(
        model.model,
        list(request.prompt_token_ids),
        max_tokens=request.max_tokens,
        sampling=settings.sampling,
        seed=request.seed,
    )
    body |= {"stream": True, "stream_options": {"include_usage": True}, "ignore_eos": request.ignore_eos}
    stream = model.client.post_sse("/v1/completions", body)
    try:
        for event in stream:
            arrived_s = clock()
            if controls.stop_requested:
                ended.finish = "cancelled"
                return
            choices = stream_choices(event, model.where)
            metrics = event.get("metrics")
            if isinstance(metrics, dict) and metrics.get("speculative_decoding") is not None:
                ended.speculative_decoding = speculative_metrics(metrics["speculative_decoding"], model.where)
            for choice in choices:
                if choice.token_ids is None and choice.text:
                    raise VllmError(f"{model.where} streamed no token_ids; it needs vLLM 0.10.2 or later")
                ids = list(choice.token_ids or [])
                if choice.finish_reason == "stop":
                    ended.finish = "stop"
                    if choice.stop_reason is None and ids and not request.ignore_eos:
                        ids = ids[:-1]  # the EOS that ended the run is not output
                if ids:
                    yield _Chunk(arrived_s, ids, chunk_texts(tokenizer, ids, choice.text))
    finally:
        stream.close()


class NativeStream:
    """An event stream of vLLM speculating on its own: speculating servers of one target, each with
    its own drafter (`servers`, by route name; routing picks one per request), and optionally a
    plain server of the same target (`baseline`) for the target-only lane, which makes the measured
    speedup a fair one: both lanes' times are the servers' own streaming."""

    def __init__(
        self,
        servers: dict[str, NativeServer],
        baseline: VllmBackend | None = None,
        routing: Routing | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.servers, self.baseline = servers, baseline
        self.drafters = tuple(servers)
        self.capabilities = vllm_native(baseline is not None)
        self.routing = routing or routing_for(self.drafters)
        self.clock = clock
        first = next(iter(servers.values()))
        self.tokenizer = RemoteTokenizer(first.client, first.model)
        self._encoder = VllmBackend(RemoteModel(first.client, first.model), remote={}, local={})

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        return self._encoder.encode(prompt, raw, earlier)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def describe(self) -> dict[str, Any]:
        """The first server as the target (with its route name), the others by route name."""
        identity: dict[str, Any] = {"backend": "vllm", "mode": "native", "models": {}, "k": {}}
        for i, (name, server) in enumerate(self.servers.items()):
            model = server.describe()["models"]["target"]
            identity["models"] |= {"target": model | {"route": name}} if i == 0 else {name: model}
            identity["k"][name] = server.k
        if self.baseline is not None:
            identity["baseline"] = self.baseline.describe()["models"]["target"]
        return identity

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        raise ConfigError("vllm_native", "cannot score text: give the target's server without --vllm-native")

    def close(self) -> None:
        for server in self.servers.values():
            server.client.close()
        if self.baseline is not None:
            self.baseline.close()

    def generate(self, request: Request, controls: LiveControls, clock: Clock | None = None) -> Iterator[Event]:
        """Speculative on the server the route picks; target-only on the baseline server."""
        clock = clock or self.clock
        lengths = [s.max_model_len for s in self.servers.values() if s.max_model_len]
        if self.baseline is not None and self.baseline.context_length:
            lengths.append(self.baseline.context_length)  # the target-only lane asks it for the same output
        context = min(lengths) if lengths else None
        check_context(len(request.prompt_token_ids), context)
        if context is not None:  # as the engine does: the output stops where the context ends, not in an HTTP 400
            request = replace(request, max_tokens=min(request.max_tokens, context - len(request.prompt_token_ids)))
        if request.mode not in self.capabilities.modes:
            raise ConfigError("mode", f"{request.mode} cannot run in native mode: {NATIVE_FIXED}")
        if request.mode == "target":
            assert self.baseline is not None
            return baseline_events(self.baseline, self.tokenizer, request, controls, clock)
        return self._speculative(request, controls, clock, self.routing.choice(request.prompt).drafter)

    def _speculative(self, request: Request, controls: LiveControls, clock: Clock, auto_route: str) -> Iterator[Event]:
        """One native request as engine events, on the server the route setting picks (`auto_route`
        when it is auto); `controls` is read for its settings at the start and for a stop request
        between chunks (the server fixes k, drafter and acceptance rule)."""
        settings = controls.settings
        route = resolve_route(settings.route, auto_route)
        if route not in self.servers:  # `none`, from a route map: every server here speculates
            raise ConfigError(
                "route_map", f"sends this prompt to {route}, and each server here speculates: map it to a server"
            )
        server = self.servers[route]
        if server.k is not None and server.k <= K_LIMIT:  # sessions record the k that ran: the server's
            settings = settings.changed(k=server.k)
        yield StartEvent(
            mode="speculative",
            drafter=route,
            auto_route=auto_route,
            prompt_token_ids=request.prompt_token_ids,
            seed=request.seed,
            settings=settings,
        )
        metrics = Metrics(speculative=True)
        metrics.start_s = clock()
        before = parse_prometheus(server.client.get_text("/metrics"))
        model = RemoteModel(server.client, server.model)
        ended, generated, texts = _Stream(), [], []
        last_s = metrics.start_s
        chunks = _read(
            model,
            tokenizer=self.tokenizer,
            request=request,
            settings=settings,
            controls=controls,
            clock=clock,
            ended=ended,
        )
        for chunk in chunks:
            k = ended.speculative_decoding.get("num_spec_tokens") or server.k
            sources = chunk_guess(len(chunk.token_ids), k, first=not generated)
            tokens = [Token(*fields) for fields in zip(chunk.token_ids, chunk.texts, sources, strict=True)]
            chunk_ms = 1000 * (chunk.arrived_s - last_s)
            yield from _chunk_events(
                tokens,
                route=route,
                k=server.k,
                token_index=len(generated),
                chunk_ms=chunk_ms,
                metrics=metrics,
                now_s=chunk.arrived_s,
            )
            generated += chunk.token_ids
            texts += chunk.texts
            last_s = chunk.arrived_s
        finish, speculative_decoding = ended.finish, ended.speculative_decoding
        after = parse_prometheus(server.client.get_text("/metrics"))
        accepted, drafted = speculative_decoding.get("per_step_accepted"), speculative_decoding.get("per_step_drafted")
        if accepted is not None and drafted is not None:
            exact = recolour(len(generated), accepted, drafted)
            metrics.tokens_by_source = Counter(exact)
            yield RecolourEvent(tuple(exact), True)
        server_metrics = {
            "speculative_decoding": speculative_decoding or None,
            "sources_exact": accepted is not None and drafted is not None,
            "k": speculative_decoding.get("num_spec_tokens") or server.k,
            "counters_delta": counter_delta(before, after),
            "counters_contaminated": before.get(RUNNING, 0.0) > 0 or after.get(RUNNING, 0.0) > 0,
        }
        yield DoneEvent(
            finish,
            tuple(generated),
            "".join(texts),
            _with_server_counts(metrics.to_dict(), speculative_decoding, server_metrics),
        )


def baseline_events(
    baseline: VllmBackend, tokenizer: RemoteTokenizer, request: Request, controls: LiveControls, clock: Clock
) -> Iterator[Event]:
    """Target-only on the plain server, read exactly as the native lane is read (server text,
    arrival times), so the two lanes' speeds compare like with like."""
    settings = controls.settings
    yield StartEvent(
        mode="target",
        drafter=None,
        auto_route=None,
        prompt_token_ids=request.prompt_token_ids,
        seed=request.seed,
        settings=settings,
    )
    metrics = Metrics(speculative=False)
    metrics.start_s = last_s = clock()
    ended, generated, texts = _Stream(), [], []
    chunks = _read(
        baseline.target,
        tokenizer=tokenizer,
        request=request,
        settings=settings,
        controls=controls,
        clock=clock,
        ended=ended,
    )
    for chunk in chunks:
        for i, (token_id, text) in enumerate(zip(chunk.token_ids, chunk.texts, strict=True)):
            step_ms = 1000 * (chunk.arrived_s - last_s) if i == 0 else 0.0
            yield StepEvent(len(generated), None, Token(token_id, text, "target"), step_ms)
            generated.append(token_id)
            texts.append(text)
        metrics.add_tokens(["target"] * len(chunk.token_ids), chunk.arrived_s)
        last_s = chunk.arrived_s
    yield DoneEvent(ended.finish, tuple(generated), "".join(texts), metrics.to_dict())


def _chunk_events(
    tokens: list[Token], route: str, k: int | None, token_index: int, chunk_ms: float, metrics: Metrics, now_s: float
) -> Iterator[Event]:
    """The first token of the run from prefill as a target step; every chunk after as a round
    of chunk-size-minus-one accepted drafts (the guess a RecolourEvent may correct)."""
    if token_index == 0:
        yield StepEvent(0, route, tokens[0], chunk_ms)
        metrics.add_tokens(["target"], now_s)
        tokens, token_index = tokens[1:], 1
        if not tokens:
            return
    num_accepted = sum(t.source == "accepted" for t in tokens)
    drafted = max(k or len(tokens) - 1, num_accepted)
    round = RoundEvent(
        index=metrics.num_spec_steps,
        token_index=token_index,
        drafter=route,
        drafted=(),  # the server's drafts are its own: only how many, and that they were a chain
        parents=chain(drafted),
        positions=(),
        num_accepted=num_accepted,
        tokens=tuple(tokens),
        draft_ms=0.0,
        verify_ms=chunk_ms,
        overhead_ms=0.0,
    )
    metrics.add_round(round)
    sources: list[TokenSource] = [t.source for t in tokens]
    metrics.add_tokens(sources, now_s)
    yield round


# The server's own counts, when it sends them, replace the chunk-size guess of the round counts.
_SERVER_COUNTS = (
    "num_spec_steps",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
)


def _with_server_counts(
    metrics: dict[str, Any], speculative_decoding: dict[str, Any], server: dict[str, Any]
) -> dict[str, Any]:
    counts = {name: speculative_decoding[name] for name in _SERVER_COUNTS if speculative_decoding.get(name) is not None}
    # Per-position acceptance exists only in /metrics: accepted at each position over drafts.
    delta = server["counters_delta"]
    drafts = delta.get("vllm:spec_decode_num_drafts_total") or 0
    positions = sorted(
        (int(key[len(PER_POSITION) + 1 : -1]), value)
        for key, value in delta.items()
        if key.startswith(PER_POSITION + "[")
    )
    if drafts > 0 and positions:
        counts["acceptance_per_position"] = [value / drafts for _, value in positions]
    return metrics | counts | {"server": server}


def connect_native(
    target_url: str,
    more: Sequence[tuple[str, str]] = (),
    baseline_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 60.0,
    route: str = NATIVE_ROUTE,
    auth: Mapping[str, tuple[str, str]] | None = None,
    routing: Routing | None = None,
) -> NativeStream:
    """Connect to a speculating server (routed to as `route`), to `more` (name, URL) speculating
    servers of the same target, and, when given, to a plain server of it; all must tokenize alike.
    `routing` chooses among the servers (default: the heuristic's, over their names)."""
    urls = [(route, server_root(target_url)), *((name, server_root(url, "draft_url")) for name, url in more)]
    logins = dict(auth or {})
    with contextlib.ExitStack() as opened:  # a refusal closes the connections made before it
        servers: dict[str, NativeServer] = {}
        for name, url in urls:
            client = VllmClient(name, url, api_key, timeout_s, auth=logins.get(url))
            opened.callback(client.close)
            servers[name] = NativeServer(client)
        ids = {
            f"native server {name!r} ({s.client.root})": tokenize(s.client, s.model, PROBE_TEXT)
            for name, s in servers.items()
        }
        baseline = None
        if baseline_url is not None:
            root = server_root(baseline_url, "baseline_url")
            baseline = connect_vllm_backend(root, api_key=api_key, timeout_s=timeout_s, auth=logins)
            opened.callback(baseline.close)
            target = baseline.target
            ids[f"baseline ({target.client.root})"] = tokenize(target.client, target.model, PROBE_TEXT)
        check_same_tokens(ids)
        opened.pop_all()  # connected: the stream closes them
    return NativeStream(servers, baseline, routing=routing)
