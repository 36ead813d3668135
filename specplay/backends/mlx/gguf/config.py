"""The mlx-lm config.json of a GGUF file, from its metadata (`<arch>.*` keys) and tensor shapes."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from specplay.backends.mlx.gguf.reader import USE_FOLDER, GGUFFile
from specplay.backends.mlx.gguf.tensors import dequantized
from specplay.errors import ModelError

MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text"}
SUPPORTED = ", ".join(sorted(MODEL_TYPES))

# Not in Gemma 3's GGUF files: its published configuration (llama.cpp hard-codes them too).
GEMMA3_LOCAL_ROPE_BASE = 10_000.0
GEMMA3_SLIDING_WINDOW_PATTERN = 6
GEMMA3_27B_LAYERS = 62
_BLOCK = re.compile(r"blk\.(\d+)\.")

# Llama 3.x rope scaling, which llama.cpp stores only as the frequency factors it implies (rope_freqs).
LLAMA3_LOW_FREQ_FACTOR = 1.0
LLAMA3_HIGH_FREQ_FACTOR = 4.0
LLAMA3_ORIGINAL_CONTEXT = 8192


def _required(gguf: GGUFFile, key: str) -> Any:
    value = gguf.arch_value(key)
    if value is None:
        raise ModelError(
            f"{gguf.path} lacks metadata {gguf.architecture}.{key}; the file is incomplete, convert it again"
        )
    return value


def _one_per_model(gguf: GGUFFile, key: str, default: Any = None) -> Any:
    """A value llama.cpp may store per layer; mlx-lm needs one for all layers."""
    value = gguf.arch_value(key, default) if default is not None else _required(gguf, key)
    if isinstance(value, np.ndarray | list):
        values = {int(v) for v in value}
        if len(values) != 1:
            raise ModelError(
                f"{gguf.path} varies {gguf.architecture}.{key} by layer, which mlx-lm cannot; {USE_FOLDER}"
            )
        return values.pop()
    return value


def _llama3_factors(factor: float, base: float, dims: int) -> np.ndarray:
    """The per-frequency divisors Llama 3 rope scaling applies (what llama.cpp stores as rope_freqs)."""
    wavelen = 2 * math.pi * base ** (np.arange(0, dims, 2) / dims)
    low_wavelen = LLAMA3_ORIGINAL_CONTEXT / LLAMA3_LOW_FREQ_FACTOR
    high_wavelen = LLAMA3_ORIGINAL_CONTEXT / LLAMA3_HIGH_FREQ_FACTOR
    smooth = (LLAMA3_ORIGINAL_CONTEXT / wavelen - LLAMA3_LOW_FREQ_FACTOR) / (
        LLAMA3_HIGH_FREQ_FACTOR - LLAMA3_LOW_FREQ_FACTOR
    )
    medium = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < high_wavelen, 1.0, np.where(wavelen > low_wavelen, factor, medium))


def _rope_scaling(gguf: GGUFFile, base: float, head_dim: int) -> dict[str, Any] | None:
    kind = gguf.arch_value("rope.scaling.type", "none")
    factor = gguf.arch_value("rope.scaling.factor")
    if "rope_freqs.weight" in gguf.tensors:
        freq_factors = dequantized(gguf.tensors["rope_freqs.weight"]).reshape(-1)
        llama3 = float(freq_factors.max())
        if np.allclose(freq_factors, _llama3_factors(llama3, base, head_dim), rtol=1e-4):
            return {
                "rope_type": "llama3",
                "factor": llama3,
                "low_freq_factor": LLAMA3_LOW_FREQ_FACTOR,
                "high_freq_factor": LLAMA3_HIGH_FREQ_FACTOR,
                "original_max_position_embeddings": LLAMA3_ORIGINAL_CONTEXT,
            }
        raise ModelError(f"{gguf.path} scales rotary frequencies (rope_freqs) as mlx-lm cannot; {USE_FOLDER}")
    if kind == "none" or factor in (None, 1.0):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(factor)}
    if kind == "yarn":
        scaling: dict[str, Any] = {"rope_type": "yarn", "factor": float(factor)}
        original = gguf.arch_value("rope.scaling.original_context_length")
        if original:
            scaling["original_max_position_embeddings"] = int(original)
        for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if (value := gguf.arch_value(f"rope.scaling.{key}")) is not None:
                scaling[name] = float(value)
        return scaling
    raise ModelError(f"{gguf.path} uses rope scaling {kind!r}, which this converter does not support; {USE_FOLDER}")


def _check_sizes(gguf: GGUFFile, hidden: int, layers: int) -> None:
    """The sizes the metadata declares against the tensors the file holds, before any is built: a
    small file claiming a billion blocks would otherwise make a billion modules."""
    embedding = gguf.tensors["token_embd.weight"].shape
    blocks = {int(m.group(1)) for name in gguf.tensors if (m := _BLOCK.match(name))}
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    found = None
    if len(blocks) != layers or max(blocks, default=-1) != layers - 1:
        found = f"block_count {layers} but tensors for {len(blocks)} blocks"
    elif len(embedding) != 2 or embedding[1] != hidden:
        found = f"embedding_length {hidden} but a token embedding of shape {list(embedding)}"
    elif isinstance(tokens, list) and len(tokens) > embedding[0]:
        found = f"{len(tokens)} tokens but an embedding of {embedding[0]} rows"
    if found:
        raise ModelError(f"{gguf.path} is damaged: its metadata declares {found}; download the GGUF file again")


def model_config(gguf: GGUFFile) -> dict[str, Any]:
    """config.json for mlx-lm (without quantization and token ids, which other parts add)."""
    arch = gguf.architecture
    if arch not in MODEL_TYPES:
        raise ModelError(
            f"{gguf.path} holds a {arch or 'unnamed'!r} model; GGUF conversion supports {SUPPORTED}: "
            f"for other architectures, {USE_FOLDER}"
        )
    if "token_embd.weight" not in gguf.tensors:
        raise ModelError(f"{gguf.path} has no token_embd.weight tensor; the file is incomplete, convert it again")
    hidden = int(_required(gguf, "embedding_length"))
    layers = int(_required(gguf, "block_count"))
    _check_sizes(gguf, hidden, layers)
    heads = int(_one_per_model(gguf, "attention.head_count"))
    kv_heads = int(_one_per_model(gguf, "attention.head_count_kv", heads))
    head_dim = int(gguf.arch_value("attention.key_length", hidden // heads))
    rope_dims = int(gguf.arch_value("rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise ModelError(
            f"{gguf.path} rotates {rope_dims} of {head_dim} head dimensions, which mlx-lm's {arch} cannot; {USE_FOLDER}"
        )
    default_base = 1_000_000.0 if arch in ("qwen2", "qwen3", "gemma3") else 10_000.0
    base = float(gguf.arch_value("rope.freq_base", default_base))
    config: dict[str, Any] = {
        "model_type": MODEL_TYPES[arch],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": int(_one_per_model(gguf, "feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": float(_required(gguf, "attention.layer_norm_rms_epsilon")),
        "vocab_size": gguf.tensors["token_embd.weight"].shape[0],
        "max_position_embeddings": int(gguf.arch_value("context_length", 4096)),
        "rope_theta": base,
        "rope_scaling": _rope_scaling(gguf, base, head_dim),
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
    }
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in gguf.tensors
        config["mlp_bias"] = "blk.0.ffn_up.bias" in gguf.tensors
    if arch == "gemma3":
        scale = gguf.arch_value("attention.scale")
        if scale:
            scalar = 1 / float(scale) ** 2
        elif config["num_hidden_layers"] == GEMMA3_27B_LAYERS:  # Gemma 3 27B scales queries by its hidden size
            scalar = hidden / heads
        else:
            scalar = head_dim
        config |= {
            "rope_local_base_freq": GEMMA3_LOCAL_ROPE_BASE,
            "query_pre_attn_scalar": scalar,
            "sliding_window": int(_required(gguf, "attention.sliding_window")),
            "sliding_window_pattern": GEMMA3_SLIDING_WINDOW_PATTERN,
        }
    return config
