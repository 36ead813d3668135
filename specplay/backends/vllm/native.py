"""Native mode: vLLM speculates itself (`--speculative-config`), specplay watches.

k, the drafter and the acceptance rule are fixed by the server for its lifetime (vLLM has no
per-request speculation setting). Each token is coloured exactly from the per-step arrays of
`--per-request-spec-decode-metrics detailed` when the server sends them; otherwise from the
streamed chunk sizes, a heuristic (chunks merge when the client lags), marked approximate.
`/metrics` counters are read before and after each request; the deltas are flagged when other
requests ran meanwhile.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.connect import served_model, server_version
from specplay.backends.vllm.protocol import completion_body
from specplay.engine.events import Source
from specplay.engine.settings import SamplingParams

SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:generation_tokens_total",
)
RUNNING = "vllm:num_requests_running"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# vLLM's steps, recoloured: the first token comes from prefill (the target alone); each step j
# then emits a_j accepted draft tokens and one more token, a bonus when all d_j drafts were
# accepted and a corrected (vLLM: recovered) token otherwise. Stop strings and max_tokens can cut
# the last step, so the list is truncated to the output length.
def recolour(num_tokens: int, per_step_accepted: Sequence[int], per_step_drafted: Sequence[int]) -> list[Source]:
    sources: list[Source] = ["target"]
    for accepted, drafted in zip(per_step_accepted, per_step_drafted, strict=True):
        sources += ["accepted"] * accepted
        sources.append("bonus" if accepted == drafted else "corrected")
    return sources[:num_tokens]


# The heuristic when no per-step arrays come back: a streamed chunk of n tokens is taken as one
# step with n - 1 accepted drafts, its last token a bonus when n - 1 == k, else corrected. Wrong
# whenever the server merged chunks (a lagging client) or skipped steps without drafts (ngram).
def chunk_sources(chunk_sizes: Sequence[int], k: int | None) -> list[Source]:
    sources: list[Source] = []
    for i, size in enumerate(chunk_sizes):
        if size <= 0:
            continue
        if i == 0:
            sources.append("target")
            size -= 1
            if size == 0:
                continue
        sources += ["accepted"] * (size - 1)
        sources.append("bonus" if k is not None and size - 1 == k else "corrected")
    return sources


def parse_prometheus(text: str) -> dict[str, float]:
    """Counters summed over the `engine` label (labels parsed by name, whatever their order);
    per-position acceptance keyed as `name[position]`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        position = dict(_LABEL.findall(labels or "")).get("position")
        key = f"{name}[{position}]" if position is not None else name
        out[key] = out.get(key, 0.0) + number
    return out


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    names = [*SPEC_COUNTERS, *(k for k in after if k.startswith(PER_POSITION + "["))]
    return {name: after.get(name, 0.0) - before.get(name, 0.0) for name in names if name in after}


@dataclass
class NativeResult:
    token_ids: list[int]
    text: str
    sources: list[Source]
    exact: bool
    """Colours from the server's per-step arrays (True) or the chunk-size heuristic (False)."""
    chunk_sizes: list[int]
    finish_reason: str | None
    time_to_first_token_ms: float | None
    tokens_per_s: float | None
    spec_metrics: dict[str, Any] | None
    """The server's metrics.speculative_decoding, when it sends them."""
    counters: dict[str, float] = field(default_factory=dict)
    """Before/after deltas of vLLM's spec-decode counters."""
    counters_contaminated: bool = False
    """Other requests ran on the server meanwhile, so the deltas are not this request's alone."""
    k: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "vllm-native",
            "token_ids": self.token_ids,
            "text": self.text,
            "sources": self.sources,
            "sources_exact": self.exact,
            "finish_reason": self.finish_reason,
            "chunk_sizes": self.chunk_sizes,
            "k": self.k,
            "metrics": {
                "num_tokens": len(self.token_ids),
                "time_to_first_token_ms": self.time_to_first_token_ms,
                "tokens_per_s": self.tokens_per_s,
                "speculative_decoding": self.spec_metrics,
                "server_counters_delta": self.counters,
                "server_counters_contaminated": self.counters_contaminated,
            },
        }


class NativeServer:
    """One vLLM server that speculates with its own fixed drafter and k."""

    def __init__(self, client: VllmClient) -> None:
        self.client = client
        self.version = server_version(client)
        self.model, self.max_model_len = served_model(client)
        self.k = self._k_from_metrics()

    def _k_from_metrics(self) -> int | None:
        """k from the number of per-position counters, if the server exports them."""
        positions = [key for key in parse_prometheus(self.client.get_text("/metrics")) if key.startswith(PER_POSITION)]
        return len(positions) or None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "vllm",
            "mode": "native",
            "models": {
                "target": {"source": self.client.root, "served_model": self.model, "vllm_version": self.version}
            },
            "k": self.k,
        }

    def generate(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, seed: int, max_tokens: int, ignore_eos: bool
    ) -> NativeResult:
        before = parse_prometheus(self.client.get_text("/metrics"))
        body = completion_body(self.model, list(prompt_token_ids), max_tokens, sampling, seed, None, stream=True)
        body |= {"stream_options": {"include_usage": True}, "ignore_eos": ignore_eos}
        start = time.perf_counter()
        first_s = last_s = None
        token_ids: list[int] = []
        chunks: list[int] = []
        texts: list[str] = []
        finish: str | None = None
        spec: dict[str, Any] | None = None
        for event in self.client.post_sse("/v1/completions", body):
            for choice in event.get("choices") or []:
                ids = choice.get("token_ids") or []
                if ids:
                    now = time.perf_counter()
                    first_s = first_s if first_s is not None else now
                    last_s = now
                    token_ids += ids
                    chunks.append(len(ids))
                texts.append(choice.get("text") or "")
                finish = choice.get("finish_reason") or finish
            metrics = event.get("metrics")
            if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
                spec = metrics["speculative_decoding"]
        after = parse_prometheus(self.client.get_text("/metrics"))
        k = (spec or {}).get("num_spec_tokens") or self.k
        per_step = (spec or {}).get("per_step_accepted"), (spec or {}).get("per_step_drafted")
        if per_step[0] is not None and per_step[1] is not None:
            sources, exact = recolour(len(token_ids), per_step[0], per_step[1]), True
        else:
            sources, exact = chunk_sources(chunks, k), False
        tokens_per_s = None
        if first_s is not None and last_s is not None and last_s > first_s:
            tokens_per_s = (len(token_ids) - 1) / (last_s - first_s)
        return NativeResult(
            token_ids,
            "".join(texts),
            sources,
            exact,
            chunks,
            finish,
            1000 * (first_s - start) if first_s is not None else None,
            tokens_per_s,
            spec,
            counter_delta(before, after),
            before.get(RUNNING, 0.0) > 0 or after.get(RUNNING, 0.0) > 0,
            k,
        )
