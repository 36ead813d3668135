"""One model on one vLLM server, as a generation uses it: what it serves and how it reports logprobs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.protocol import (
    DEFAULT_VOCAB_BOUND,
    Choice,
    completion_body,
    parse_choices,
    stream_choices,
    token_ids_reply,
)
from specplay.engine.settings import SamplingParams


def ended_on_eos(finish_reason: str | None, stop_reason: Any, token_ids: Sequence[int]) -> set[int]:
    """The EOS id a reply ended on, if any: vLLM says "stop" with no stop_reason only for the
    model's EOS; a stop token or string (its generation config's extras too) is named in stop_reason."""
    if finish_reason == "stop" and stop_reason is None and token_ids:
        return {int(token_ids[-1])}
    return set()


@dataclass
class RemoteModel:
    client: VllmClient
    model: str
    """The served model name sent as `model`."""
    version: str = "?"
    max_model_len: int | None = None
    raw_logprobs: bool = True
    """Sample logprobs come before temperature and filters (vLLM's default --logprobs-mode)."""
    top_logprobs: int = 20
    vocab_size: int = DEFAULT_VOCAB_BOUND
    """Bounds tempered tail mass only."""
    token_limit: int = DEFAULT_VOCAB_BOUND
    """Every id this server sends must be below it: the vocabulary of the models that read its ids
    (a local drafter's, when there is one)."""
    eos_token_ids: set[int] = field(default_factory=set)
    """EOS ids learned from replies that stopped on their own (vLLM does not list them)."""

    @property
    def where(self) -> str:
        return self.client.where

    def complete(
        self,
        prompt: Sequence[int] | Sequence[Sequence[int]],
        max_tokens: int,
        sampling: SamplingParams,
        seed: int | None,
        num_choices: int = 1,
        need_logprobs: bool = True,
        **extra: Any,
    ) -> list[Choice]:
        logprobs = self.top_logprobs if need_logprobs else None
        body = completion_body(
            self.model,
            prompt,
            max_tokens=max_tokens,
            sampling=sampling,
            seed=seed,
            logprobs=logprobs,
            ignore_eos=False,
            **extra,
        )
        reply = self.client.post_json("/v1/completions", body)
        choices = parse_choices(reply, self.where, num_choices, need_logprobs, self.token_limit)
        for choice in choices:
            self.eos_token_ids |= ended_on_eos(choice.finish_reason, choice.stop_reason, choice.token_ids)
        return choices

    def ask_ends_text(self, token_id: int) -> bool:
        """Whether this model's text ends at `token_id`, on its server's word: one greedy token
        restricted to it (vLLM's allowed_token_ids), learned from the reply like any other."""
        if token_id not in self.eos_token_ids and 0 <= token_id < self.token_limit:
            probe = SamplingParams(0.0)
            self.complete([token_id], 1, probe, None, need_logprobs=False, allowed_token_ids=[token_id])
        return token_id in self.eos_token_ids

    def stream(
        self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams, seed: int | None
    ) -> Iterator[int]:
        """Generated ids as the server streams them."""
        body = completion_body(
            self.model,
            prompt,
            max_tokens=max_tokens,
            sampling=sampling,
            seed=seed,
            logprobs=None,
            ignore_eos=False,
            stream=True,
        )
        events = self.client.post_sse("/v1/completions", body)
        try:
            for event in events:
                for choice in stream_choices(event, self.where, self.token_limit):
                    token_ids = choice.token_ids or []
                    # known before the engine sees it
                    self.eos_token_ids |= ended_on_eos(choice.finish_reason, choice.stop_reason, token_ids)
                    yield from token_ids
        finally:
            events.close()

    def prompt_rows(
        self,
        context: Sequence[int],
        tokens: Sequence[int],
        sampling: SamplingParams,
        seed: int | None,
        top: int,
        need_logprobs: bool = True,
    ) -> tuple[list[dict[int, tuple[float, int]]], Choice]:
        """One request for `context` + `tokens` with `prompt_logprobs`: each of `tokens`' rows
        (token id -> (logprob, rank); raw, before temperature and filters, and always listing the
        actual token), and the choice, whose one generated token is a sample after them all.
        vLLM recomputes such a prompt without the prefix cache."""
        start = len(context)
        (choice,) = self.complete(
            [*context, *tokens],
            max_tokens=1,
            sampling=sampling,
            seed=seed,
            num_choices=1,
            need_logprobs=need_logprobs,
            prompt_logprobs=top,
        )
        rows = choice.prompt_logprobs
        if rows is None or len(rows) < start + len(tokens):
            raise VllmError(f"{self.where} did not return prompt_logprobs; it needs vLLM 0.6 or later")
        out = []
        for i, token in enumerate(tokens):
            row = rows[start + i]
            if row is None or token not in row:
                raise VllmError(f"{self.where} left token {token} out of prompt_logprobs")
            out.append(row)
        return out, choice

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """This model's log-probability, at temperature 1, of each of `token_ids` after the prompt
        (prompt logprobs are raw; with 0 the server lists only the actual token)."""
        if not token_ids:
            return []
        rows, _ = self.prompt_rows(prompt_token_ids, token_ids, SamplingParams(), None, 0, need_logprobs=False)
        return [row[token][0] for row, token in zip(rows, token_ids, strict=True)]

    def tokenize(self, body: dict[str, Any]) -> list[int]:
        """POST /tokenize with `body`; its ids, checked like every id this server sends."""
        return token_ids_reply(self.client.post_json("/tokenize", body), self.where, self.token_limit)

    def describe(self) -> dict[str, Any]:
        """Where and what; never the API key."""
        return {
            "source": self.client.root,
            "path": self.client.root,  # where the model lives, as for local models
            "served_model": self.model,
            "vllm_version": self.version,
            "max_model_len": self.max_model_len,
            "logprobs_mode": "raw_logprobs" if self.raw_logprobs else "processed_logprobs",
        }
