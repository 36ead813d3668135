"""The real MLX backend with its generations kept for inspection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specplay.backends.mlx import MlxBackend
from specplay.backends.mlx.generation import MlxGeneration
from specplay.engine.backend_protocol import Generation
from specplay.engine.conversation import Exchange


class Observed:
    """The real MLX backend, with its generations kept for inspection and an optional EOS override."""

    def __init__(self, backend: MlxBackend, eos_token_ids: frozenset[int] | None = None) -> None:
        self.inner = backend
        self.drafters = backend.drafters
        self.eos_token_ids = backend.eos_token_ids if eos_token_ids is None else eos_token_ids
        self.capabilities = backend.capabilities
        self.context_length = backend.context_length
        self.generations: list[MlxGeneration] = []

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        return self.inner.encode(prompt, raw, earlier)

    def detokenizer(self) -> Any:
        return self.inner.detokenizer()

    def open_generation(
        self,
        prompt_token_ids: Sequence[int],
        prefill: Sequence[str | None] = (None,),
        previous: Generation | None = None,
    ) -> MlxGeneration:
        generation = self.inner.open_generation(prompt_token_ids, prefill, previous)
        self.generations.append(generation)
        return generation

    def token_text(self, token_id: int) -> str:
        return self.inner.token_text(token_id)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        return self.inner.score(prompt_token_ids, token_ids)

    def close(self) -> None:
        self.inner.close()
