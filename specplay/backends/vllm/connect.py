"""Connecting honestly: what each server is, whether it returns what specplay asks for, and
whether every model maps text to the same token ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.protocol import DEFAULT_VOCAB_BOUND, completion_body, parse_choices, token_ids_reply
from specplay.backends.vllm.remote import RemoteModel
from specplay.engine.settings import SamplingParams

PROBE_TEXT = "specplay probe: The quick brown fox jumps over the lazy dog. def f(x): return x + 1"


def served_model(client: VllmClient) -> tuple[str, int | None]:
    """The first model the server lists, and its max_model_len."""
    body = client.get_json("/v1/models")
    try:
        card = body["data"][0]
        name, length = str(card["id"]), card.get("max_model_len")
    except (TypeError, KeyError, IndexError):
        raise VllmError(f"{client.where} lists no model at /v1/models; is it a vLLM server?") from None
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)):
        raise VllmError(f"{client.where} lists max_model_len {length!r}, not a whole number; is it a vLLM server?")
    if length is not None and length < 1:
        raise VllmError(
            f"{client.where} lists max_model_len {length}: a model that takes no tokens; is it a vLLM server?"
        )
    return name, length


def server_version(client: VllmClient) -> str:
    body = client.get_json("/version")
    if not isinstance(body, dict) or "version" not in body:
        raise VllmError(f"{client.where} has no vLLM /version; point --target-url / --draft-url at `vllm serve`")
    return str(body["version"])


def tokenize(client: VllmClient, model: str, text: str, limit: int = DEFAULT_VOCAB_BOUND) -> list[int]:
    body = client.post_json("/tokenize", {"model": model, "prompt": text, "add_special_tokens": True})
    return token_ids_reply(body, client.where, limit)


def connect(client: VllmClient, top_logprobs: int, is_target: bool) -> RemoteModel:
    """A checked RemoteModel: version, served name, a one-token probe whose requested fields must
    all come back (vLLM ignores fields it does not know), and the server's logprobs mode."""
    version = server_version(client)
    name, max_model_len = served_model(client)
    model = RemoteModel(client, name, version, max_model_len, top_logprobs=top_logprobs)
    prompt = tokenize(client, name, PROBE_TEXT)[:16]
    extra: dict[str, Any] = {"prompt_logprobs": top_logprobs} if is_target else {}
    probe = _probe(model, prompt, 1.0, extra)
    if is_target:
        rows = probe["prompt_logprobs"]
        if not isinstance(rows, list) or len(rows) != len(prompt) or rows[0] is not None:
            raise VllmError(f"{client.where} did not return prompt_logprobs as vLLM does; it needs vLLM 0.6 or later")
        if any(str(prompt[j]) not in rows[j] for j in range(1, len(prompt))):
            raise VllmError(f"{client.where} left actual prompt tokens out of prompt_logprobs; use vLLM 0.6 or later")
    # Sample logprobs before or after temperature? Ask at two temperatures with the same seed.
    cool = _probe(model, prompt, 0.5, {})
    listed_1 = probe["logprobs"]["top_logprobs"][0]
    listed_half = cool["logprobs"]["top_logprobs"][0]
    common = set(listed_1) & set(listed_half)
    model.raw_logprobs = all(abs(listed_1[t] - listed_half[t]) < 1e-3 for t in common)
    return model


def _probe(model: RemoteModel, prompt: Sequence[int], temperature: float, extra: dict[str, Any]) -> dict[str, Any]:
    client, k = model.client, model.top_logprobs
    body = completion_body(
        model.model, prompt, max_tokens=1, sampling=SamplingParams(temperature), seed=0, logprobs=k, **extra
    )
    try:
        reply = client.post_json("/v1/completions", body)
    except VllmError as error:
        if "max allowed" in str(error) or "logprobs" in str(error).lower():
            raise VllmError(
                f"{error} (start the server with --max-logprobs {k}, or pass --top-logprobs lower)"
            ) from None
        raise
    parse_choices(reply, client.where, 1, need_logprobs=True)
    choice = reply["choices"][0]
    listed = choice["logprobs"]["top_logprobs"][0]
    if len(listed) < min(k, 2):
        raise VllmError(f"{client.where} listed {len(listed)} logprobs where {k} were asked for")
    if choice.get("prompt_token_ids") is None:
        raise VllmError(f"{client.where} did not return prompt_token_ids; it needs vLLM 0.10.2 or later")
    return choice


def check_same_tokens(models: dict[str, list[int]]) -> None:
    """Every model must map the probe text to the target's ids, or drafts mean nothing to it."""
    reference_name, reference = next(iter(models.items()))
    for name, ids in models.items():
        if ids != reference:
            first = next(
                (i for i, (a, b) in enumerate(zip(reference, ids, strict=False)) if a != b),
                min(len(ids), len(reference)),
            )
            raise VllmError(
                f"{name} does not tokenize like {reference_name}: the probe text differs from token {first} on "
                f"({reference[first : first + 3]} vs {ids[first : first + 3]}); "
                "use a drafter with the target's tokenizer"
            )
