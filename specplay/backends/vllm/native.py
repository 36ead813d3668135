"""Native mode: vLLM speculates itself (`--speculative-config`), specplay watches.

k, the drafter and the acceptance rule are fixed by the server for its lifetime (vLLM has no
per-request speculation setting). Each token is coloured exactly from the per-step arrays of
`--per-request-spec-decode-metrics detailed` when the server sends them; otherwise from the
streamed chunk sizes, a heuristic (chunks merge when the client lags), marked approximate.
`/metrics` counters are read before and after each request; the deltas are flagged when other
requests ran meanwhile.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.connect import served_model, server_version
from specplay.backends.vllm.errors import VllmError
from specplay.engine.events import TokenSource

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
def recolour(num_tokens: int, per_step_accepted: Sequence[int], per_step_drafted: Sequence[int]) -> list[TokenSource]:
    sources: list[TokenSource] = ["target"]
    for accepted, drafted in zip(per_step_accepted, per_step_drafted, strict=True):
        sources += ["accepted"] * accepted
        sources.append("bonus" if accepted == drafted else "corrected")
    return sources[:num_tokens]


# The heuristic when no per-step arrays come back: a streamed chunk of n tokens is taken as one
# step with n - 1 accepted drafts, its last token a bonus when n - 1 == k, else corrected. Wrong
# whenever the server merged chunks (a lagging client) or skipped steps without drafts (ngram).
def chunk_guess(size: int, k: int | None, first: bool) -> list[TokenSource]:
    """One chunk's sources by the heuristic above; the stream's first chunk opens with the
    prefill token, the target's alone."""
    if size <= 0:
        return []
    head: list[TokenSource] = ["target"] if first else []
    size -= len(head)
    if size == 0:
        return head
    return [*head, *["accepted"] * (size - 1), "bonus" if k is not None and size - 1 == k else "corrected"]


def parse_prometheus(text: str) -> dict[str, float]:
    """Counters summed over the `engine` label (labels parsed by name, whatever their order);
    per-position acceptance keyed as `name[position]`. Samples that are not finite numbers, or
    whose position is not a whole number, are skipped: a counter specplay cannot use."""
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
        if not math.isfinite(number) or (position is not None and not (position.isascii() and position.isdigit())):
            continue
        key = f"{name}[{int(position)}]" if position is not None else name
        out[key] = out.get(key, 0.0) + number
    return out


_COUNTS = ("num_spec_tokens", "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")
_RATES = ("mean_acceptance_length", "draft_acceptance_rate")
_PER_STEP = ("per_step_accepted", "per_step_drafted")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def speculative_metrics(value: Any, where: str) -> dict[str, Any]:
    """A response's metrics.speculative_decoding, only the fields specplay reads and each checked
    (sessions keep it, and recolouring trusts the per-step arrays); one VllmError otherwise."""

    def wrong(field: str, what: str) -> VllmError:
        name = ".".join(["metrics.speculative_decoding", field] if field else ["metrics.speculative_decoding"])
        return VllmError(f"{where} sent {name} that is not {what}; is it a vLLM server?")

    if not isinstance(value, dict):
        raise wrong("", "an object")
    out: dict[str, Any] = {}
    for field in _COUNTS:
        if value.get(field) is not None:
            if not _count(value[field]):
                raise wrong(field, "a whole number of 0 or more")
            out[field] = value[field]
    for field in _RATES:
        if value.get(field) is not None:
            number = value[field]
            if isinstance(number, bool) or not isinstance(number, int | float) or not 0 <= number < math.inf:
                raise wrong(field, "a finite number of 0 or more")
            out[field] = float(number)
    accepted, drafted = value.get(_PER_STEP[0]), value.get(_PER_STEP[1])
    if accepted is not None or drafted is not None:
        lists = isinstance(accepted, list) and isinstance(drafted, list) and len(accepted) == len(drafted)
        if not lists or not all(_count(a) and _count(d) and a <= d for a, d in zip(accepted, drafted, strict=True)):
            raise wrong("per_step_accepted", "a list as long as per_step_drafted, each step accepting 0 to its drafts")
        out |= {_PER_STEP[0]: list(accepted), _PER_STEP[1]: list(drafted)}
    return out


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    names = [*SPEC_COUNTERS, *(k for k in after if k.startswith(PER_POSITION + "["))]
    return {name: after.get(name, 0.0) - before.get(name, 0.0) for name in names if name in after}


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
