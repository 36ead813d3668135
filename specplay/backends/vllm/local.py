"""Mixed mode: a drafter on this machine's MLX, next to a target on a vLLM server.

Runs on the one MLX thread. The drafter's full distributions are known here, so the draft side of
acceptance is exact; only the target side is top-K.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from specplay.backends.mlx import blas  # noqa: F401  (OpenBLAS before mlx, see blas.py)

# isort: split
import mlx.core as mx
import numpy as np

from specplay.backends.mlx.generation import ModelCache
from specplay.backends.mlx.loading import LoadedModel, rewindable_cache, vocab_table
from specplay.backends.vllm.topk import TopK
from specplay.engine.accept import inverse_cdf_sample
from specplay.engine.sampling import sampling_probs, softmax
from specplay.engine.settings import SamplingParams

MAX_LISTED = 4096  # a full row beyond this keeps its most probable tokens and the exact tail mass


def row_to_topk(row: np.ndarray) -> TopK:
    """A full row as listed tokens; cut to the most probable, every unlisted token is at most the
    least listed one."""
    nonzero = np.flatnonzero(row > 0)
    if nonzero.size > MAX_LISTED:
        nonzero = nonzero[np.argsort(-row[nonzero])[:MAX_LISTED]]
    probs = {int(i): float(row[i]) for i in nonzero}
    return TopK(probs, max(0.0, 1.0 - sum(probs.values())), min(probs.values(), default=0.0))


class LocalDrafter:
    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.vocab_size = max(vocab_table(loaded.tokenizer).values()) + 1
        rewindable_cache(loaded)  # refuse now rather than at the first round

    def open(self) -> LocalDraftCache:
        return LocalDraftCache(
            ModelCache(self.loaded.name, self.loaded.model, rewindable_cache(self.loaded), self.vocab_size)
        )


class LocalDraftCache:
    """One generation's cache of a local drafter; `tokens` is the generation's list, shared."""

    def __init__(self, cache: ModelCache) -> None:
        self.cache = cache

    def _step(self, inputs: list[int]) -> mx.array:
        return self.cache.forward(mx.array(inputs))[-1:].astype(mx.float32)

    def catch_up(self, tokens: Sequence[int]) -> int:
        """Take in every token but the last (drafting feeds that one); how many were taken."""
        pending = list(tokens[self.cache.length : len(tokens) - 1])
        if pending:
            self.cache.forward(mx.array(pending))
            mx.eval([c.state for c in self.cache.cache])
        return len(pending)

    def draft(
        self,
        tokens: Sequence[int],
        k: int,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> tuple[list[int], list[TopK] | None]:
        """Up to k tokens after `tokens`, and the distribution each was drawn from (None: greedy)."""
        self.cache.trim_to(len(tokens) - 1)
        inputs = list(tokens[self.cache.length :])
        drafted: list[int] = []
        rows: list[np.ndarray] = []
        confidences: list[float] = []
        for i in range(k):
            logits = self._step(inputs)
            if sampling.greedy:
                token = int(mx.argmax(logits, axis=-1).item())
                belief = softmax(logits, mx)
            else:
                belief = sampling_probs(logits, sampling, mx)
                u = mx.array(np.asarray([uniforms[i]], dtype=np.float32))
                token = int(inverse_cdf_sample(belief, u, mx).item())
                rows.append(np.array(belief[0], dtype=np.float64))
            drafted.append(token)
            inputs = [token]
            if keep_drafting is not None:
                confidences.append(float(belief[0, token].item()))
                if not keep_drafting(confidences):
                    break
        return drafted, None if sampling.greedy else [row_to_topk(row) for row in rows]

    def generate(self, tokens: list[int], sampling: SamplingParams, draw: Callable[[], float]) -> Iterator[int]:
        """Tokens appended to `tokens` one by one; closing rewinds the cache to them."""
        self.cache.trim_to(len(tokens) - 1)
        try:
            while True:
                logits = self._step(list(tokens[self.cache.length :]))
                if sampling.greedy:
                    token = int(mx.argmax(logits, axis=-1).item())
                else:
                    u = mx.array(np.asarray([draw()], dtype=np.float32))
                    token = int(inverse_cdf_sample(sampling_probs(logits, sampling, mx), u, mx).item())
                tokens.append(token)
                yield token
        finally:
            self.cache.trim_to(len(tokens) - 1)

    def probs_at(
        self, prefix: Sequence[int], committed: Sequence[int], sampling: SamplingParams, tokens: Sequence[int]
    ) -> dict[int, float]:
        """p_draft of `tokens` after `prefix`, from the full row (a drafted row keeps only its most
        probable tokens). The cache keeps what it shares with the generation's `committed` tokens and
        the prefix, and ends holding the prefix, which a commit after this position keeps."""
        shared = next(
            (j for j, (a, b) in enumerate(zip(committed, prefix, strict=False)) if a != b),
            min(len(committed), len(prefix)),
        )
        self.cache.trim_to(min(shared, len(prefix) - 1))
        row = np.array(sampling_probs(self._step(list(prefix[self.cache.length :])), sampling, mx)[0], np.float64)
        return {token: float(row[token]) for token in tokens}

    def trim_to(self, length: int) -> None:
        self.cache.trim_to(length)

    @property
    def length(self) -> int:
        return self.cache.length
