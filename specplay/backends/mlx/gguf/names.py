"""GGUF tensor names as mlx-lm parameter paths, and the changes llama.cpp's converter made to some tensors.

llama.cpp applies rotary embeddings to adjacent pairs of a head's dimensions for llama-family models, so its
converter permutes the rows of q and k (within each head: (2, half) -> (half, 2)) from the Hugging Face layout,
whose rotary embedding pairs dimension i with i + half. `unpermute` restores that layout, the one mlx-lm's
llama expects. Gemma stores RMSNorm weights as w and scales by 1 + w; llama.cpp bakes the 1 in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import mlx.core as mx

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GEMMA3_BLOCK = _BLOCK | {
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_QWEN3_BLOCK = _BLOCK | {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
IGNORED = frozenset({"rope_freqs.weight"})
"""Tensors that become configuration (rope scaling), not weights."""


@dataclass(frozen=True)
class Layout:
    block: dict[str, str]
    permuted_qk: bool
    """llama.cpp permuted q and k rows (llama family)."""
    norm_plus_one: bool
    """llama.cpp stored RMSNorm weights as 1 + w (Gemma)."""


LAYOUTS = {
    "llama": Layout(_BLOCK, permuted_qk=True, norm_plus_one=False),
    "qwen2": Layout(_BLOCK, permuted_qk=False, norm_plus_one=False),
    "qwen3": Layout(_QWEN3_BLOCK, permuted_qk=False, norm_plus_one=False),
    "gemma3": Layout(_GEMMA3_BLOCK, permuted_qk=False, norm_plus_one=True),
}
_NAME = re.compile(r"^(?:blk\.(\d+)\.)?([a-z_0-9]+)\.(weight|bias)$")


def mlx_path(layout: Layout, name: str) -> tuple[str, str] | None:
    """(module path, parameter) of GGUF tensor `name`, or None for a tensor that is not a weight.
    KeyError for a tensor the mlx-lm model has no place for."""
    if name in IGNORED:
        return None
    match = _NAME.match(name)
    base = None
    if match:
        block, stem, kind = match.groups()
        base = _TOP.get(stem) if block is None else layout.block.get(stem)
    if base is None:
        raise KeyError(name)
    return (base if block is None else f"model.layers.{block}.{base}"), kind


def unpermute(rows: mx.array, heads: int) -> mx.array:
    """Undo llama.cpp's per-head row permutation of q or k (weights, quantized words, scales, biases)."""
    shape = rows.shape
    half = shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def heads_of(module: str, n_heads: int, n_kv_heads: int) -> int | None:
    """The head count whose rows llama.cpp permuted in `module`, or None when it did not permute it."""
    if module.endswith("self_attn.q_proj"):
        return n_heads
    if module.endswith("self_attn.k_proj"):
        return n_kv_heads
    return None


def is_norm(module: str) -> bool:
    return module.endswith(("norm", "layernorm"))
