"""The parts of vLLM's /v1/completions JSON specplay reads and writes (vLLM 0.32 and 0.33 shapes).

Requests always send every sampling parameter: otherwise the server fills them from the model's
generation_config.json. Token strings are asked for as `token_id:N` placeholders, since decoded
strings collide (byte-fallback pieces all decode to U+FFFD).

Every token id a server sends (generated tokens, top_logprobs keys, prompt_logprobs keys, /tokenize)
arrives through this module and is checked here against `limit`, the vocabulary of the models that
will read it: an id outside it would crash a local drafter or be passed on to another server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specplay.backends.vllm.errors import VllmError
from specplay.engine.settings import SamplingParams

TOKEN_ID_PREFIX = "token_id:"
DEFAULT_VOCAB_BOUND = 262_144
"""An upper bound on vocabulary size where no model here knows the real one (the server does not say)."""


def completion_body(
    model: str,
    prompt: Sequence[int] | Sequence[Sequence[int]] | str,
    *,
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


def checked_id(value: Any, where: str, limit: int) -> int:
    """A token id from a server, refused unless it is in [0, limit)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _shape(where, f"a token id of {str(value)[:40]!r}")
    if not 0 <= value < limit:
        raise VllmError(
            f"{where} sent token id {str(value)[:40]}, outside the vocabulary of {limit} tokens; "
            "point specplay at a server of the target model (whose tokenizer the drafters share)"
        )
    return value


def token_ids_reply(body: Any, where: str, limit: int = DEFAULT_VOCAB_BOUND) -> list[int]:
    """The ids of a /tokenize answer, checked."""
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise VllmError(f"{where} answered /tokenize without tokens")
    return [checked_id(t, where, limit) for t in tokens]


def token_id(key: str, where: str, limit: int = DEFAULT_VOCAB_BOUND) -> int:
    """`token_id:N` to N, checked."""
    if key.startswith(TOKEN_ID_PREFIX) and (number := _integer(key[len(TOKEN_ID_PREFIX) :])) is not None:
        return checked_id(number, where, limit)
    raise VllmError(f"{where} listed token {key!r} instead of token_id:N; it ignored return_tokens_as_token_ids")


@dataclass(frozen=True, slots=True)
class Choice:
    token_ids: list[int]
    top_logprobs: list[dict[int, float]]
    """Per generated token: listed token id -> logprob (the sampled token always among them)."""
    prompt_logprobs: list[dict[int, tuple[float, int]] | None] | None
    """Per prompt token: token id -> (logprob, rank); entry 0 is None."""
    finish_reason: str | None
    stop_reason: Any = None
    """The stop token or string the reply ended on; None when it ended on the model's EOS."""


@dataclass(frozen=True, slots=True)
class StreamChoice:
    """One choice of one streamed event."""

    token_ids: list[int] | None
    text: str
    finish_reason: str | None
    stop_reason: Any


def _integer(text: str) -> int | None:
    """A decimal integer of at most 20 digits, one sign allowed (a server's id, checked after);
    None for anything else."""
    digits = text.removeprefix("-")
    return int(text) if 0 < len(digits) <= 20 and digits.isascii() and digits.isdigit() else None


def _shape(where: str, what: str) -> VllmError:
    return VllmError(f"{where} sent {what} in a shape specplay does not know; is it a vLLM server?")


def _int_list(value: Any, where: str, what: str, limit: int) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _shape(where, what)
    return [checked_id(v, where, limit) for v in value]


def _logprob(value: Any, where: str) -> float:
    """A listed logprob: a number, -inf allowed (vLLM may send it, or its -9999 floor); never NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value > 0:
        raise _shape(where, f"a logprob of {str(value)[:40]!r}")
    return float(value)


def _top(entries: Any, where: str, limit: int) -> list[dict[int, float]]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise _shape(where, "top_logprobs")
    out = []
    for entry in entries:
        if entry is not None and not isinstance(entry, dict):
            raise _shape(where, "top_logprobs")
        out.append({token_id(str(key), where, limit): _logprob(lp, where) for key, lp in (entry or {}).items()})
    return out


def _prompt_logprobs(entries: Any, where: str, limit: int) -> list[dict[int, tuple[float, int]] | None] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise _shape(where, "prompt_logprobs")
    out: list[dict[int, tuple[float, int]] | None] = []
    for entry in entries:
        if entry is None:
            out.append(None)
            continue
        if not isinstance(entry, dict):
            raise _shape(where, "prompt_logprobs")
        row = {}
        for key, value in entry.items():
            number = _integer(str(key))
            if not isinstance(value, dict) or number is None:
                raise _shape(where, "prompt_logprobs")
            rank = value.get("rank") or 0
            if isinstance(rank, bool) or not isinstance(rank, int):
                raise _shape(where, "prompt_logprobs")
            row[checked_id(number, where, limit)] = (_logprob(value.get("logprob"), where), rank)
        out.append(row)
    return out


def _check_listed(token_ids: Sequence[int], top: Sequence[dict[int, float]], where: str) -> None:
    """vLLM lists each generated token among its logprobs: a token its listing leaves out is a reply
    that contradicts itself, and specplay would otherwise take the token and judge by the numbers."""
    for place, (token, listed) in enumerate(zip(token_ids, top, strict=False)):
        if listed and token not in listed:
            raise VllmError(
                f"{where} sent token {token} at place {place} of a reply but listed logprobs for other tokens there: "
                "its token_ids and its logprobs disagree; is it a vLLM server, with nothing rewriting its replies?"
            )


def _choice_list(body: Any, where: str) -> list[dict[str, Any]]:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise VllmError(f"{where} sent a completion without choices: {str(body)[:200]}")
    return choices


def parse_choices(
    body: Any, where: str, expected: int, need_logprobs: bool, limit: int = DEFAULT_VOCAB_BOUND
) -> list[Choice]:
    """Choices in index order, checked for the fields specplay asked for, their shapes, and every
    token id below `limit`."""
    raw = _choice_list(body, where)
    if not all(isinstance(c.get("index"), int) for c in raw):
        raise _shape(where, "choices without an index")
    raw = sorted(raw, key=lambda c: c["index"])
    if len(raw) != expected:
        raise VllmError(f"{where} sent {len(raw)} choices where {expected} were asked for")
    choices = []
    for choice in raw:
        if choice.get("token_ids") is None:
            raise VllmError(f"{where} did not return token_ids; it needs vLLM 0.10.2 or later (return_token_ids)")
        token_ids = _int_list(choice["token_ids"], where, "token_ids", limit)
        logprobs = choice.get("logprobs")
        if logprobs is not None and not isinstance(logprobs, dict):
            raise _shape(where, "logprobs")
        if need_logprobs and not (logprobs and logprobs.get("top_logprobs")):
            raise VllmError(f"{where} did not return logprobs; start it with --max-logprobs 20")
        top = _top(logprobs.get("top_logprobs") if logprobs else None, where, limit)
        _check_listed(token_ids, top, where)
        prompt = _prompt_logprobs(choice.get("prompt_logprobs"), where, limit)
        finish = choice.get("finish_reason")
        choices.append(
            Choice(token_ids, top, prompt, finish if isinstance(finish, str) else None, choice.get("stop_reason"))
        )
    return choices


def stream_choices(event: Any, where: str, limit: int = DEFAULT_VOCAB_BOUND) -> list[StreamChoice]:
    """The choices of one streamed event (none in the last, usage-only event), shapes and ids checked."""
    if not isinstance(event, dict):
        raise _shape(where, "a stream event")
    raw = event.get("choices") or []
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise _shape(where, "a stream event's choices")
    out = []
    for choice in raw:
        ids = choice.get("token_ids")
        text = choice.get("text") or ""
        finish = choice.get("finish_reason")
        if not isinstance(text, str) or (finish is not None and not isinstance(finish, str)):
            raise _shape(where, "a stream event's choices")
        checked = None if ids is None else _int_list(ids, where, "token_ids", limit)
        out.append(StreamChoice(checked, text, finish, choice.get("stop_reason")))
    return out
