"""Native mode as the engine's event stream, so the playground and saved sessions show it as
they show any run.

The server speculates with its own drafter and k; specplay only watches. Each streamed chunk
becomes one round: its first token (the very first from prefill, the target's alone) and the
chunk-size guess of accepted and corrected or bonus tokens (a guess, since chunks merge when the
client lags). When the server sends its per-step arrays with the last chunk, a RecolourEvent
replaces the guess with its exact account. Nothing in a round claims a probability: native mode
reports none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specplay.backends.vllm.backend import VllmBackend, connect_vllm_backend
from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.connect import PROBE_TEXT, check_same_tokens, tokenize
from specplay.backends.vllm.detok import RemoteTokenizer
from specplay.backends.vllm.native import (
    PER_POSITION,
    RUNNING,
    NativeServer,
    chunk_sources,
    counter_delta,
    parse_prometheus,
    recolour,
)
from specplay.backends.vllm.protocol import completion_body
from specplay.backends.vllm.remote import RemoteModel
from specplay.backends.vllm.urls import server_root
from specplay.engine.controls import LiveControls
from specplay.engine.events import (
    DoneEvent,
    Event,
    FinishReason,
    RecolourEvent,
    RoundEvent,
    Source,
    StartEvent,
    StepEvent,
    Token,
)
from specplay.engine.loop import Request
from specplay.engine.metrics import Metrics
from specplay.engine.router import resolve_route

NATIVE_ROUTE = "server"
"""The route's name in native mode: the server's own drafter serves every request."""
Clock = Callable[[], float]


def chunk_texts(tokenizer: RemoteTokenizer, token_ids: list[int], text: str) -> list[str]:
    """Each token's share of a chunk's text: single-token decodes when they add up to the text
    the server sent, else the whole text on the chunk's last token (a character split across
    tokens, or a tokenizer that merges on decode)."""
    pieces = [tokenizer.decode([token]) for token in token_ids]
    if "".join(pieces) == text:
        return pieces
    return [""] * (len(token_ids) - 1) + [text]


class NativeBackend:
    """The model host's backend in native mode: speculating servers of one target, each with its
    own drafter (`servers`, by route name; routing picks one per request), and optionally a plain
    server of the same target (`baseline`) for the target-only lane, which makes the measured
    speedup a fair one: both lanes' times are the servers' own streaming."""

    native = True

    def __init__(self, servers: dict[str, NativeServer], baseline: VllmBackend | None = None) -> None:
        self.servers, self.baseline = servers, baseline
        self.drafters = tuple(servers)
        self.eos_token_ids: frozenset[int] = frozenset()
        first = next(iter(servers.values()))
        self.tokenizer = RemoteTokenizer(first.client, first.model)
        self._encoder = VllmBackend(RemoteModel(first.client, first.model), {}, {})

    def encode(self, prompt: str, raw: bool) -> list[int]:
        return self._encoder.encode(prompt, raw)

    def describe(self) -> dict[str, Any]:
        """The first server as the target (its route is NATIVE_ROUTE), the others by route name."""
        identity: dict[str, Any] = {"backend": "vllm", "mode": "native", "models": {}, "k": {}}
        for name, server in self.servers.items():
            identity["models"]["target" if name == NATIVE_ROUTE else name] = server.describe()["models"]["target"]
            identity["k"][name] = server.k
        if self.baseline is not None:
            identity["baseline"] = self.baseline.describe()["models"]["target"]
        return identity

    def close(self) -> None:
        for server in self.servers.values():
            server.client.close()
        if self.baseline is not None:
            self.baseline.close()

    def events(self, request: Request, controls: LiveControls, clock: Clock, auto_route: str) -> Iterator[Event]:
        """One native request as engine events, on the server the route setting picks (`auto_route`
        when it is auto); `controls` is read for its settings at the start and for a stop request
        between chunks (the server fixes k, drafter and acceptance rule)."""
        settings = controls.settings
        route = resolve_route(settings.route, auto_route)
        server = self.servers[route]
        if server.k is not None:  # the session records the k that ran, which is the server's
            settings = settings.changed(k=server.k)
        yield StartEvent("speculative", route, auto_route, request.prompt_token_ids, request.seed, settings)
        metrics = Metrics(speculative=True)
        metrics.start_s = clock()
        before = parse_prometheus(server.client.get_text("/metrics"))
        body = completion_body(
            server.model, list(request.prompt_token_ids), request.max_tokens, settings.sampling, request.seed
        )
        body |= {"stream": True, "stream_options": {"include_usage": True}, "ignore_eos": request.ignore_eos}
        generated: list[int] = []
        texts: list[str] = []
        sizes: list[int] = []
        spec: dict[str, Any] = {}
        finish: FinishReason = "length"
        last_s = clock()
        stream = server.client.post_sse("/v1/completions", body)
        try:
            for chunk in stream:
                if controls.stop_requested:
                    finish = "cancelled"
                    break
                if isinstance(chunk.get("metrics"), dict):
                    spec = chunk["metrics"].get("speculative_decoding") or spec
                for choice in chunk.get("choices") or []:
                    ids = [int(t) for t in choice.get("token_ids") or []]
                    if choice.get("finish_reason") == "stop":
                        finish = "stop"
                        if choice.get("stop_reason") is None and ids and not request.ignore_eos:
                            ids = ids[:-1]  # the EOS that ended the run is not output
                    if not ids:
                        continue
                    now = clock()
                    sizes.append(len(ids))
                    sources = chunk_sources(sizes, spec.get("num_spec_tokens") or server.k)[-len(ids) :]
                    pieces = chunk_texts(self.tokenizer, ids, choice.get("text") or "")
                    tokens = [Token(t, text, s) for t, text, s in zip(ids, pieces, sources, strict=True)]
                    yield from _chunk_events(
                        tokens, route, server.k, len(generated), 1000 * (now - last_s), metrics, now
                    )
                    generated += ids
                    texts += pieces
                    last_s = now
        finally:
            stream.close()
        after = parse_prometheus(server.client.get_text("/metrics"))
        accepted, drafted = spec.get("per_step_accepted"), spec.get("per_step_drafted")
        if accepted is not None and drafted is not None:
            exact = recolour(len(generated), accepted, drafted)
            metrics.tokens_by_source = Counter(exact)
            yield RecolourEvent(tuple(exact), True)
        server_metrics = {
            "speculative_decoding": spec or None,
            "sources_exact": accepted is not None and drafted is not None,
            "k": spec.get("num_spec_tokens") or server.k,
            "counters_delta": counter_delta(before, after),
            "counters_contaminated": before.get(RUNNING, 0.0) > 0 or after.get(RUNNING, 0.0) > 0,
        }
        yield DoneEvent(
            finish, tuple(generated), "".join(texts), _with_server_counts(metrics.to_dict(), spec, server_metrics)
        )


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
        metrics.num_spec_steps, token_index, route, drafted, (), (), num_accepted, tuple(tokens), 0.0, chunk_ms, 0.0
    )
    metrics.add_round(round)
    sources: list[Source] = [t.source for t in tokens]
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


def _with_server_counts(metrics: dict[str, Any], spec: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    counts = {name: spec[name] for name in _SERVER_COUNTS if spec.get(name) is not None}
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
) -> NativeBackend:
    """Connect to a speculating server (route NATIVE_ROUTE), to `more` (name, URL) speculating
    servers of the same target, and, when given, to a plain server of it; all must tokenize alike."""
    urls = [(NATIVE_ROUTE, server_root(target_url)), *((name, server_root(url, "draft_url")) for name, url in more)]
    servers = {name: NativeServer(VllmClient(name, url, api_key, timeout_s)) for name, url in urls}
    ids = {
        f"native server {name!r} ({s.client.root})": tokenize(s.client, s.model, PROBE_TEXT)
        for name, s in servers.items()
    }
    baseline = None
    if baseline_url is not None:
        baseline = connect_vllm_backend(server_root(baseline_url, "baseline_url"), api_key=api_key, timeout_s=timeout_s)
        target = baseline.target
        ids[f"baseline ({target.client.root})"] = tokenize(target.client, target.model, PROBE_TEXT)
    check_same_tokens(ids)
    return NativeBackend(servers, baseline)
