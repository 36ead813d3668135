"""Find, load and pair mlx-lm models, offline: local folders or the user's Hugging Face cache."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Never reach a hub at run time: a model absent from the cache must fail at once, not hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specplay.backends.mlx import blas  # noqa: F401  (OpenBLAS before mlx.core)
from specplay.backends.mlx.folder_check import check_folder
from specplay.backends.mlx.loaded_check import check_forward, check_loaded
from specplay.engine.conversation import Exchange, chat_messages, raw_text
from specplay.errors import ModelError, detail_of


@dataclass(frozen=True)
class LoadedModel:
    name: str
    location: str
    """What the user passed: a folder or a Hugging Face id."""
    path: Path
    model: nn.Module
    tokenizer: TokenizerWrapper


def resolve_model_path(location: str) -> Path:
    """A local model folder, or the cached snapshot of a Hugging Face id; never a download."""
    path = Path(location).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        from specplay.backends.mlx.gguf import converted_folder

        return converted_folder(path)  # from the cache after the first time
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"model {location!r} has no config.json; pass an mlx-lm model folder")
        return path
    looks_like_path = location.startswith((".", "/", "~")) or location.count("/") != 1
    if not looks_like_path:
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(location, local_files_only=True))
        except Exception:
            pass
    raise ModelError(
        f"model {location!r} not found: no such folder, and not in the Hugging Face cache "
        f"(download it first, e.g. `hf download {location}`, or pass a local folder)"
    )


def load_model(name: str, location: str) -> LoadedModel:
    from mlx_lm import load

    path = resolve_model_path(location)
    check_folder(location, path)  # declared sizes against the data, before mlx-lm builds anything
    try:
        model, tokenizer = load(str(path), lazy=True)
    except Exception as exc:
        detail = detail_of(exc)
        raise ModelError(f"could not load model {location!r} ({detail}); download or convert the model again") from exc
    check_loaded(name, location, model, tokenizer)
    if mx.default_device() == mx.cpu:
        model = upcast_for_cpu(model)
    # Dequantizing and casting are lazy: left so, the first forward pass of the first run would
    # compute them (seconds on SmolLM2) and read as that lane's time to first token.
    mx.eval(model.parameters())
    check_forward(name, location, model, run_cache(model))
    return LoadedModel(name, location, path, model, tokenizer)


def parameter_count(model: nn.Module) -> int:
    """Weights the model computes with (a quantized matrix counted unpacked, as it runs on CPUs)."""
    from mlx.utils import tree_flatten

    return sum(value.size for _, value in tree_flatten(model.parameters()))


def upcast_for_cpu(model: nn.Module) -> nn.Module:
    """fp32 weights: bf16, fp16 and quantized matmuls run several times slower than fp32 on CPUs
    (the shipped demo target is stored int8 to stay small, and runs dequantized)."""
    if any(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for _, m in model.named_modules()):
        from mlx_lm.utils import dequantize_model

        model = dequantize_model(model)
    model.set_dtype(mx.float32)
    return model


def vocab_table(tokenizer: TokenizerWrapper) -> dict[str, int]:
    return dict(tokenizer.get_vocab())


def check_token_mapping(target: LoadedModel, drafter: LoadedModel, target_vocab: dict[str, int]) -> None:
    """Drafters receive the target's token ids, so both must map every id to the same token."""
    drafter_vocab = vocab_table(drafter.tokenizer)
    if drafter_vocab == target_vocab:
        return
    by_id_target = {i: t for t, i in target_vocab.items()}
    by_id_drafter = {i: t for t, i in drafter_vocab.items()}
    first = min(i for i in by_id_target.keys() | by_id_drafter.keys() if by_id_target.get(i) != by_id_drafter.get(i))
    raise ModelError(
        f"drafter {drafter.name!r} ({drafter.location}) does not share the target's token mapping: "
        f"id {first} is {by_id_target.get(first)!r} in the target but {by_id_drafter.get(first)!r} in the drafter; "
        "use a drafter with the target's tokenizer"
    )


def encode_prompt(tokenizer: TokenizerWrapper, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
    """A prompt as the model sees it: a user message through the chat template, after the
    conversation's earlier turns, or (raw, or a model without one) the text with the tokenizer's
    special tokens. Runs and distillation share it."""
    if raw or not tokenizer.has_chat_template:
        return list(tokenizer.encode(raw_text(prompt, earlier)))
    messages = chat_messages(prompt, earlier)
    try:
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    except Exception as exc:  # a template is a program of the model's: jinja's errors, or its own raise
        raise ModelError(
            f"the model's chat template cannot render the prompt ({detail_of(exc, 160)}); "
            "fix chat_template in its tokenizer_config.json, or pass --raw to send the prompt as it is"
        ) from exc


def run_cache(model: nn.Module) -> list[Any]:
    """The model's cache as runs give it, sliding-window layers with a plain KVCache (see below)."""
    return [KVCache() if isinstance(c, RotatingKVCache) else c for c in make_prompt_cache(model)]


def rewindable_cache(loaded: LoadedModel) -> list[Any]:
    """The model's cache with every layer rewindable, or a clear refusal.

    Sliding-window layers get a plain KVCache: the model still applies the window through its
    attention mask, and a RotatingKVCache stops trimming silently once its window wraps.
    """
    cache = []
    for layer_cache in run_cache(loaded.model):
        if not layer_cache.is_trimmable():
            raise ModelError(
                f"model {loaded.name!r} ({loaded.location}) keeps a {type(layer_cache).__name__}, "
                "state that cannot be rewound (recurrent or state-space layers); speculative "
                "decoding needs models with attention caches"
            )
        cache.append(layer_cache)
    return cache


_FULL_HASH_LIMIT = 256 * 2**20  # beyond this, hash each file's size and its first and last 4 MiB
_SAMPLE = 4 * 2**20


def folder_identity(loaded: LoadedModel) -> dict[str, str]:
    """What a session records of a model: where it came from (its `source`: a GGUF file or what
    the user passed; its `path`: the folder loaded) and hashes of its config and weights.

    Weights above 256 MiB in all are fingerprinted (size, first and last 4 MiB of each file), so
    identifying a large model costs milliseconds instead of a full read.
    """
    config = hashlib.sha256((loaded.path / "config.json").read_bytes()).hexdigest()
    files = sorted(loaded.path.glob("*.safetensors"))
    full = sum(f.stat().st_size for f in files) <= _FULL_HASH_LIMIT
    weights = hashlib.sha256()
    for file in files:
        weights.update(file.name.encode())
        with file.open("rb") as handle:
            if full:
                for block in iter(lambda: handle.read(2**20), b""):
                    weights.update(block)
            else:
                size = file.stat().st_size
                weights.update(str(size).encode())
                weights.update(handle.read(_SAMPLE))
                handle.seek(max(0, size - _SAMPLE))
                weights.update(handle.read(_SAMPLE))
    gguf = {"kind": "gguf"} if loaded.location.lower().endswith(".gguf") else {}
    return gguf | {
        "source": loaded.location,
        "path": str(loaded.path.resolve()),
        "config_sha256": config,
        "weights_sha256": weights.hexdigest(),
        "weights_hash": "full" if full else "sampled",
    }
