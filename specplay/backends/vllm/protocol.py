"""The parts of vLLM's /v1/completions JSON specplay reads and writes (vLLM 0.33 shapes).

Requests always send every sampling parameter: otherwise the server fills them from the model's
generation_config.json. Token strings are asked for as `token_id:N` placeholders, since decoded
strings collide (byte-fallback pieces all decode to U+FFFD).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specplay.backends.vllm.errors import VllmError
from specplay.engine.settings import SamplingParams

TOKEN_ID_PREFIX = "token_id:"


def completion_body(
    model: str,
    prompt: Sequence[int] | Sequence[Sequence[int]] | str,
    max_tokens: int,
    sampling: SamplingParams,
    seed: int | None = None,
    logprobs: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt if isinstance(prompt, str) else [list(p) if not isinstance(p, int) else p for p in prompt],
        "max_tokens": max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "min_p": sampling.min_p,
        "repetition_penalty": 1.0,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "ignore_eos": True,
    }
    if seed is not None:
        body["seed"] = seed
    if logprobs is not None:
        body["logprobs"] = logprobs
    return body | extra


def token_id(key: str, where: str) -> int:
    """`token_id:N` to N."""
    if key.startswith(TOKEN_ID_PREFIX):
        try:
            return int(key[len(TOKEN_ID_PREFIX) :])
        except ValueError:
            pass
    raise VllmError(f"{where} listed token {key!r} instead of token_id:N; it ignored return_tokens_as_token_ids")


@dataclass(frozen=True, slots=True)
class Choice:
    token_ids: list[int]
    top_logprobs: list[dict[int, float]]
    """Per generated token: listed token id -> logprob (the sampled token always among them)."""
    prompt_logprobs: list[dict[int, tuple[float, int]] | None] | None
    """Per prompt token: token id -> (logprob, rank); entry 0 is None."""
    finish_reason: str | None


def _top(entries: Any, where: str) -> list[dict[int, float]]:
    out = []
    for entry in entries or []:
        out.append({token_id(key, where): float(lp) for key, lp in (entry or {}).items()})
    return out


def _prompt_logprobs(entries: Any) -> list[dict[int, tuple[float, int]] | None] | None:
    if entries is None:
        return None
    out: list[dict[int, tuple[float, int]] | None] = []
    for entry in entries:
        if entry is None:
            out.append(None)
            continue
        out.append({int(key): (float(value["logprob"]), int(value.get("rank") or 0)) for key, value in entry.items()})
    return out


def parse_choices(body: Any, where: str, expected: int, need_logprobs: bool) -> list[Choice]:
    """Choices in index order, checked for the fields specplay asked for."""
    try:
        raw = sorted(body["choices"], key=lambda c: c["index"])
    except (TypeError, KeyError):
        raise VllmError(f"{where} sent a completion without choices: {str(body)[:200]}") from None
    if len(raw) != expected:
        raise VllmError(f"{where} sent {len(raw)} choices where {expected} were asked for")
    choices = []
    for choice in raw:
        if choice.get("token_ids") is None:
            raise VllmError(f"{where} did not return token_ids; it needs vLLM 0.10.2 or later (return_token_ids)")
        logprobs = choice.get("logprobs")
        if need_logprobs and not (logprobs and logprobs.get("top_logprobs")):
            raise VllmError(f"{where} did not return logprobs; start it with --max-logprobs 20")
        top = _top(logprobs.get("top_logprobs") if logprobs else None, where)
        try:
            prompt = _prompt_logprobs(choice.get("prompt_logprobs"))
        except (TypeError, KeyError, ValueError, AttributeError):
            raise VllmError(f"{where} sent prompt_logprobs in a shape specplay does not know") from None
        choices.append(Choice(list(choice["token_ids"]), top, prompt, choice.get("finish_reason")))
    return choices
