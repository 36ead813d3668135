"""The MLX backend: one target and named drafters sharing one token mapping.

A drafter is another model, the context itself (prompt lookup) or the target's first layers
(early exit); see drafters.py for the specs `load_mlx_backend` takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from specplay.backends.mlx import blas
from specplay.backends.mlx.drafters import (
    MODEL,
    DrafterSpec,
    EarlyExit,
    ModelDrafter,
    PromptLookup,
    as_spec,
    describe_spec,
    drafter_record,
)
from specplay.backends.mlx.early_exit import (
    EarlyExitModel,
    LayerSplit,
    check_layers,
    head_identity,
    load_exit_head,
)
from specplay.backends.mlx.generation import MlxGeneration, ModelCache, fit_vocab
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
from specplay.backends.prompt_lookup import NgramIndex
from specplay.config.capabilities import MLX
from specplay.engine.backend_protocol import Detokenizer
from specplay.errors import ConfigError
from specplay.json_text import read_json

TARGET = "target"


@dataclass(frozen=True)
class LoadedEarlyExit:
    """An early-exit drafter over a loaded target: the target's own modules, and a head if trained."""

    name: str
    spec: EarlyExit
    model: EarlyExitModel
    target_layers: int
    head: dict[str, Any] | None = None
    """The head's identity (path, sha256), for sessions."""


LoadedDrafter = LoadedModel | PromptLookup | LoadedEarlyExit
"""A drafter ready to open generations: a model, a prompt-lookup spec (nothing to load), an early exit."""


class MlxBackend:
    """Models loaded once; each `open_generation` gets fresh caches, so lanes can run side by side."""

    capabilities = MLX

    def __init__(self, target: LoadedModel, drafters: Mapping[str, LoadedDrafter]) -> None:
        self.target = target
        self.drafters = tuple(drafters)
        self.models = {TARGET: target} | {n: d for n, d in drafters.items() if isinstance(d, LoadedModel)}
        """The target and the drafters that are models of their own (what mlx-lm could also run)."""
        self.lookups = {n: d for n, d in drafters.items() if isinstance(d, PromptLookup)}
        self.early_exits = {n: d for n, d in drafters.items() if isinstance(d, LoadedEarlyExit)}
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
        for name in self.drafters:
            if name in self.lookups:
                spec = self.lookups[name]
                models[name] = drafter_record(spec) | {"source": describe_spec(spec)}
            elif name in self.early_exits:
                exit_ = self.early_exits[name]
                models[name] = drafter_record(exit_.spec) | {
                    "head": exit_.head,
                    "own_parameters": exit_.model.own_parameters(),
                    "target_layers": exit_.target_layers,
                    "source": describe_spec(exit_.spec),
                }
            else:
                models[name] = {"kind": MODEL, **folder_identity(self.models[name])}
        if mx.default_device() == mx.cpu:  # the thread count moves a CPU's speed by a fifth or more
            return {"backend": "mlx", "device": "cpu", "blas_threads": blas.THREADS_CHOSEN, "models": models}
        return {"backend": "mlx", "device": "gpu", "models": models}

    def encode(self, prompt: str, raw: bool) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, raw)

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
        for name, exit_ in self.early_exits.items():
            # Its own cache for the layers it runs: the target's kind of cache, cut to L layers.
            caches[name] = ModelCache(
                name, exit_.model, rewindable_cache(self.target)[: exit_.spec.layers], self.vocab_size
            )
        lookups = {name: NgramIndex(spec.n_min, spec.n_max) for name, spec in self.lookups.items()}
        generation = MlxGeneration(target, caches, prompt_token_ids, lookups, self.compiled)
        for name in prefill:
            generation.prefill(target if name is None else caches.get(name) or lookups[name])
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


def load_mlx_backend(target: str, drafters: Sequence[tuple[str, DrafterSpec | str]] = ()) -> MlxBackend:
    """Load `target` and each (name, drafter) pair, a drafter being a spec (ModelDrafter,
    PromptLookup, EarlyExit) or a folder or Hugging Face id; call on the MLX thread."""
    names = [name for name, _ in drafters]
    for name in names:
        if name == TARGET or names.count(name) > 1:
            raise ConfigError(
                "draft",
                f"names {name!r} {'twice' if name != TARGET else 'as a drafter'}; give each drafter its own NAME=",
            )
    loaded_target = load_model(TARGET, target)
    blas.fit_threads(parameter_count(loaded_target.model))
    return MlxBackend(
        loaded_target, {name: load_drafter(name, as_spec(spec), target=loaded_target) for name, spec in drafters}
    )


def load_drafter(name: str, spec: DrafterSpec, *, target: LoadedModel) -> LoadedDrafter:
    """What one drafter needs at run time: a model loaded, an early exit built over `target`'s own
    modules (its layer count checked, a head loaded and checked), or, for prompt lookup, nothing."""
    if isinstance(spec, ModelDrafter):
        return load_model(name, spec.path)
    if isinstance(spec, PromptLookup):
        return spec
    split = LayerSplit(target.model, f"early-exit drafter {name!r}: the target ({target.source})")
    check_layers(spec.layers, split, f"early-exit drafter {name!r}")
    head, identity = None, None
    if spec.head is not None:
        head = load_exit_head(spec.head, spec.layers, split, folder_identity(target))
        identity = head_identity(spec.head)
    return LoadedEarlyExit(name, spec, EarlyExitModel(split, spec.layers, head), len(split.layers), identity)


def release_thread() -> None:
    """Free the calling thread's MLX streams; a thread that evaluated MLX work must call it before it
    ends, or the process aborts at exit."""
    mx.clear_streams()
