"""The MLX backend: one target and named drafters sharing one token mapping."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import mlx.core as mx

from specplay.backends.mlx.generation import MlxGeneration, ModelCache, fit_vocab
from specplay.backends.mlx.loading import (
    LoadedModel,
    check_token_mapping,
    folder_identity,
    load_model,
    rewindable_cache,
    vocab_table,
)
from specplay.engine.backend import Detokenizer
from specplay.engine.capabilities import Capabilities

TARGET = "target"


class MlxBackend:
    """Models loaded once; each `open_generation` gets fresh caches, so lanes can run side by side."""

    capabilities = Capabilities(top_n=True, scoring=True)

    def __init__(self, target: LoadedModel, drafters: Mapping[str, LoadedModel]) -> None:
        self.target = target
        self.models = {TARGET: target, **drafters}
        self.drafters = tuple(drafters)
        vocab = vocab_table(target.tokenizer)
        for drafter in drafters.values():
            check_token_mapping(target, drafter, vocab)
            rewindable_cache(drafter)  # refuse now rather than at the first round
        rewindable_cache(target)
        self.vocab_size = max(vocab.values()) + 1
        self.tokenizer = target.tokenizer
        self.context_length = context_length(target)
        self.eos_token_ids = frozenset(self.tokenizer.eos_token_ids)

    def describe(self) -> dict[str, Any]:
        """Backend and model identity for session files (paths and hashes; nothing secret)."""
        return {
            "backend": "mlx",
            "device": str(mx.default_device()),
            "models": {name: folder_identity(loaded) for name, loaded in self.models.items()},
        }

    def encode(self, prompt: str, raw: bool) -> list[int]:
        if raw or not self.tokenizer.has_chat_template:
            return list(self.tokenizer.encode(prompt))
        messages = [{"role": "user", "content": prompt}]
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def detokenizer(self) -> Detokenizer:
        return self.tokenizer.detokenizer

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])  # the tokenizer holds no MLX state

    def open_generation(
        self, prompt_token_ids: Sequence[int], prefill: Sequence[str | None] = (None,)
    ) -> MlxGeneration:
        """Fresh caches; `prefill` names the models (None: the target) to bring up to the prompt now."""
        caches = {
            name: ModelCache(name, loaded.model, rewindable_cache(loaded), self.vocab_size)
            for name, loaded in self.models.items()
        }
        target = caches.pop(TARGET)
        lane = MlxGeneration(target, caches, prompt_token_ids)
        for name in prefill:
            lane.prefill(target if name is None else caches[name])
        return lane

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """The target's log-probability, at temperature 1, of each of `token_ids` after the prompt.

        One forward pass without a cache, so no lane's state is touched; call on the MLX thread.
        """
        if not token_ids:
            return []
        logits = self.target.model(mx.array([[*prompt_token_ids, *token_ids]]))[0].astype(mx.float32)
        # Position i predicts token i + 1; the generated tokens start after the prompt.
        logits = fit_vocab(logits[len(prompt_token_ids) - 1 : -1], self.vocab_size)
        log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        ids = mx.array(list(token_ids))[:, None]
        return mx.take_along_axis(log_probs, ids, axis=-1)[:, 0].tolist()

    def close(self) -> None:
        """Nothing to release here: MLX memory goes with the model thread's streams (release_thread)."""


def context_length(loaded: LoadedModel) -> int | None:
    """The model's trained context (max_position_embeddings), when its config says."""
    try:
        value = json.loads((loaded.path / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def load_mlx_backend(target: str, drafters: Sequence[tuple[str, str]] = ()) -> MlxBackend:
    """Load `target` and each (name, folder or Hugging Face id) drafter; call on the MLX thread."""
    return MlxBackend(load_model(TARGET, target), {name: load_model(name, spec) for name, spec in drafters})


def release_thread() -> None:
    """Free the calling thread's MLX streams; a thread that evaluated MLX work must call it before it
    ends, or the process aborts at exit."""
    mx.clear_streams()
