"""The MLX backend: one target and named drafters sharing one token mapping.

A drafter is of any kind the registry holds (specplay.drafters): another model, the context
itself (prompt lookup), the target's first layers (early exit). drafting.py loads and runs each
by its kind's form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mlx.core as mx

from specplay.backends.mlx import blas
from specplay.backends.mlx.drafting import LoadedDrafter, LoadedModelDrafter, ModelCache, fit_vocab, load_drafter
from specplay.backends.mlx.generation import MlxGeneration
from specplay.backends.mlx.kernels import compile_by_default
from specplay.backends.mlx.loading import (
    LoadedModel,
    check_token_mapping,
    encode_prompt,
    folder_identity,
    load_model,
    parameter_count,
    rewindable_cache,
    vocab_table,
)
from specplay.backends.mlx.trees import tree_pass
from specplay.config.capabilities import MLX
from specplay.drafters import EarlierOutputs, ModelConfig, parse_model
from specplay.engine.backend_protocol import Detokenizer, Generation
from specplay.engine.conversation import Exchange
from specplay.errors import ConfigError
from specplay.files.json_text import read_json

TARGET = "target"


class MlxBackend:
    """Models loaded once; each `open_generation` gets fresh caches, so lanes can run side by side."""

    capabilities = MLX

    def __init__(self, target: LoadedModel, drafters: Mapping[str, LoadedDrafter]) -> None:
        self.target = target
        self.loaded = dict(drafters)
        self.drafters = tuple(drafters)
        self.models = {TARGET: target} | {n: d.loaded for n, d in drafters.items() if isinstance(d, LoadedModelDrafter)}
        """The target and the drafters that are models of their own (what mlx-lm could also run)."""
        self.compiled = compile_by_default()
        """Each generation's sampling and acceptance math runs compiled (kernels.py: where it pays)."""
        vocab = vocab_table(target.tokenizer)
        for name, drafter in self.models.items():
            if name != TARGET:
                check_token_mapping(target, drafter, vocab)
                rewindable_cache(drafter)  # refuse now rather than at the first round
        rewindable_cache(target)
        self.vocab_size = max(vocab.values()) + 1
        self.tokenizer = target.tokenizer
        self.context_length = context_length(target)
        self.eos_token_ids = frozenset(self.tokenizer.eos_token_ids)

    def describe(self) -> dict[str, Any]:
        """Backend and model identity for session files (paths and hashes; nothing secret). Each
        drafter records its kind and parameters (a replay reads them back);
        only a model drafter has a `path`, so nothing replays another kind as a model."""
        models: dict[str, Any] = {TARGET: folder_identity(self.target)}
        models |= {name: drafter.record() for name, drafter in self.loaded.items()}
        if mx.default_device() == mx.cpu:  # the thread count moves a CPU's speed by a fifth or more
            return {"backend": "mlx", "device": "cpu", "blas_threads": blas.THREADS_CHOSEN, "models": models}
        return {"backend": "mlx", "device": "gpu", "models": models}

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, raw, earlier)

    def detokenizer(self) -> Detokenizer:
        return self.tokenizer.detokenizer

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])  # the tokenizer holds no MLX state

    def open_generation(
        self,
        prompt_token_ids: Sequence[int],
        prefill: Sequence[str | None] = (None,),
        previous: Generation | None = None,
    ) -> MlxGeneration:
        """Caches for a generation: `previous`'s (a conversation's last turn, on this backend),
        kept as far as they hold the tokens it shares with this prompt, else fresh ones; `prefill`
        names the models (None: the target) to bring up to the prompt now."""
        if isinstance(previous, MlxGeneration):
            generation = previous
            generation.go_on_with(prompt_token_ids)
        else:
            tree = tree_pass(self.target.model, "the target")
            target = ModelCache(TARGET, self.target.model, rewindable_cache(self.target), self.vocab_size, tree)
            drafters = {name: loaded.open(self.vocab_size) for name, loaded in self.loaded.items()}
            generation = MlxGeneration(target, drafters, prompt_token_ids, self.compiled)
        for name in prefill:
            generation.prefill(name)
        return generation

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """The target's log-probability, at temperature 1, of each of `token_ids` after the prompt.

        One forward pass without a cache, so no generation's caches are touched; call on the MLX thread.
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
        value = read_json(loaded.path / "config.json", "model config").get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def load_mlx_backend(
    target: str, drafters: Sequence[tuple[str, ModelConfig | str]] = (), earlier: EarlierOutputs | None = None
) -> MlxBackend:
    """Load `target` and each (name, drafter) pair, a drafter being a ModelConfig of any kind
    (specplay.drafters) or a folder or Hugging Face id; call on the MLX thread. `earlier`: the
    outputs the command read for the drafters that remember (drafters/memory.py)."""
    names = [name for name, _ in drafters]
    for name in names:
        if name == TARGET or names.count(name) > 1:
            raise ConfigError(
                "draft",
                f"names {name!r} {'twice' if name != TARGET else 'as a drafter'}; give each drafter its own NAME=",
            )
    loaded_target = load_model(TARGET, target)
    blas.fit_threads(parameter_count(loaded_target.model))
    models = [(name, parse_model(name, "drafter", d, "draft") if isinstance(d, str) else d) for name, d in drafters]
    loaded = {name: load_drafter(name, model, target=loaded_target, earlier=earlier) for name, model in models}
    return MlxBackend(loaded_target, loaded)


def release_thread() -> None:
    """Free the calling thread's MLX streams; a thread that evaluated MLX work must call it before it
    ends, or the process aborts at exit."""
    mx.clear_streams()
