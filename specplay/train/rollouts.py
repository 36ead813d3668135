"""The target's own continuations of prompts, sampled in batches: what DistillSpec trains on.

Prompts of different lengths are left-padded into one batch; mlx-lm's BatchKVCache masks the
padding, so each row sees only its own prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache


@dataclass(frozen=True)
class RolloutConfig:
    """How the target continues the prompts a drafter or an exit head is distilled on."""

    tokens: int = 128
    """New tokens the target writes after each prompt."""
    temperature: float = 1.0
    """Of the rollouts; the KL always uses the target's full distribution."""
    max_prompt_tokens: int = 256
    """Longer prompts keep their last tokens."""


def sample_rows(logits: mx.array, temperature: float, key: mx.array) -> mx.array:
    if temperature == 0:
        return mx.argmax(logits, axis=-1)
    return mx.random.categorical(logits.astype(mx.float32) / temperature, axis=-1, key=key)


def continue_batch(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    temperature: float,
    eos_token_id: int,
    key: mx.array,
) -> list[list[int]]:
    """Each prompt's continuation, cut after its first EOS."""
    longest = max(len(p) for p in prompts)
    padding = [longest - len(p) for p in prompts]
    tokens = mx.array([[0] * pad + list(p) for p, pad in zip(prompts, padding, strict=True)])
    cache = [BatchKVCache(padding) for _ in model.layers]
    logits = model(tokens, cache=cache)[:, -1, :]
    generated: list[mx.array] = []
    for _ in range(max_tokens):
        key, sub = mx.random.split(key)
        next_tokens = sample_rows(logits, temperature, sub)
        generated.append(next_tokens)
        logits = model(next_tokens[:, None], cache=cache)[:, -1, :]
        mx.eval(logits)
    rows = mx.stack(generated, axis=1).tolist()
    return [row[: row.index(eos_token_id) + 1] if eos_token_id in row else row for row in rows]


def rollouts(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    temperature: float,
    eos_token_id: int,
    seed: int,
    batch_size: int = 16,
    on_batch: Callable[[int, int], None] = lambda done, total: None,
) -> list[list[int]]:
    """prompt + continuation for every prompt, in the prompts' order. Prompts are batched by
    length so little compute goes to padding."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: dict[int, list[int]] = {}
    key = mx.random.key(seed)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        key, sub = mx.random.split(key)
        continuations = continue_batch(
            model,
            [prompts[i] for i in chunk],
            max_tokens=max_tokens,
            temperature=temperature,
            eos_token_id=eos_token_id,
            key=sub,
        )
        for i, continuation in zip(chunk, continuations, strict=True):
            results[i] = [*prompts[i], *continuation]
        on_batch(min(start + batch_size, len(order)), len(order))
    return [results[i] for i in range(len(prompts))]
