"""mlx-lm's own generation on the same models, timed the way specplay times itself."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import mlx.core as mx
from mlx_lm import stream_generate

from specplay.backends.mlx.mlx_backend import TARGET, MlxBackend


def mlx_lm_tokens_per_s(
    backend: MlxBackend, prompt_token_ids: Sequence[int], max_tokens: int, drafter: str | None = None, k: int = 0
) -> float | None:
    """Greedy tokens/s of mlx-lm's `stream_generate` (speculative with `drafter` and k): tokens
    after the first over the time since the first, from arrival times in this loop. None where
    mlx-lm cannot run the request (a drafter that is not a model of its own)."""
    if drafter is not None and drafter not in backend.models:
        return None  # prompt lookup and early exit have no mlx-lm counterpart to time
    tokenizer = copy.copy(backend.tokenizer)
    tokenizer.eos_token_ids = set()  # a fixed output length, as specplay's bench ignores EOS
    options = {"draft_model": backend.models[drafter].model, "num_draft_tokens": k} if drafter else {}
    arrivals = [
        time.perf_counter()
        for _ in stream_generate(
            backend.models[TARGET].model, tokenizer, mx.array(list(prompt_token_ids)), max_tokens, **options
        )
    ]
    if len(arrivals) < 2 or arrivals[-1] == arrivals[0]:
        return None
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
