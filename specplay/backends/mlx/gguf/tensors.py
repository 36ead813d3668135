"""GGUF tensor data as MLX arrays: the quantizations MLX shares with llama.cpp stay quantized, the rest
are dequantized with the gguf package.

Q4_0, Q4_1 and Q8_0 are affine per 32 values, as MLX's own quantization is: w = scale * q + bias. Only the
packing differs, so they are repacked bit for bit, not re-quantized: no accuracy is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

from specplay.backends.mlx.gguf.reader import RawTensor

GROUP_SIZE = 32
KEPT = {Q.Q4_0: 4, Q.Q4_1: 4, Q.Q8_0: 8}
"""Types repacked as MLX affine quantization, and their bits."""
PLAIN = {Q.F32: mx.float32, Q.F16: mx.float16, Q.BF16: mx.bfloat16}
DEQUANTIZED = frozenset(
    {
        Q.Q5_0,
        Q.Q5_1,
        Q.Q2_K,
        Q.Q3_K,
        Q.Q4_K,
        Q.Q5_K,
        Q.Q6_K,
        Q.IQ1_S,
        Q.IQ1_M,
        Q.IQ2_XXS,
        Q.IQ2_XS,
        Q.IQ2_S,
        Q.IQ3_XXS,
        Q.IQ3_S,
        Q.IQ4_NL,
        Q.IQ4_XS,
        Q.TQ1_0,
        Q.TQ2_0,
    }
)
"""Types MLX cannot compute with, stored dequantized (float16) after the gguf package decodes them."""
SUPPORTED = frozenset(KEPT) | frozenset(PLAIN) | DEQUANTIZED
_F16_MAX = 65504.0


@dataclass(frozen=True)
class Converted:
    arrays: dict[str, mx.array]
    """`weight` (and `scales`, `biases` when quantized): suffixes to the module's path."""
    bits: int | None
    """The MLX quantization bits, or None when stored unquantized."""


def _rows(raw: RawTensor) -> int:
    return int(np.prod(raw.shape[:-1])) if len(raw.shape) > 1 else 1


def _repack(raw: RawTensor) -> dict[str, np.ndarray]:
    """Q4_0, Q4_1, Q8_0 blocks as MLX affine weight (uint32 words), scales and biases (float16)."""
    block_bytes = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q8_0: 34}[raw.qtype]
    blocks = raw.data.reshape(_rows(raw), -1, block_bytes)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    if raw.qtype == Q.Q8_0:
        # int8 q in [-128, 127] -> MLX's unsigned 8-bit u = q + 128 (flipping the sign bit), bias -128 d
        values = blocks[..., 2:] ^ np.uint8(0x80)
        bias = -128.0 * d.astype(np.float32)
    else:
        # llama.cpp keeps values j and j + 16 of a block in one byte; MLX packs them in order, two a byte
        qs = blocks[..., 4:] if raw.qtype == Q.Q4_1 else blocks[..., 2:]
        nibbles = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)
        values = nibbles[..., 0::2] | (nibbles[..., 1::2] << np.uint8(4))
        if raw.qtype == Q.Q4_1:
            bias = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        else:
            bias = -8.0 * d.astype(np.float32)
    words = np.ascontiguousarray(values).reshape(_rows(raw), -1).view(np.uint32)
    shape = raw.shape[:-1]
    return {
        "weight": words.reshape(*shape, -1),
        "scales": d.reshape(*shape, -1),
        "biases": bias.astype(np.float16).reshape(*shape, -1),
    }


def dequantized(raw: RawTensor) -> np.ndarray:
    """The tensor as float32 values, whatever its storage."""
    if raw.qtype == Q.F32:
        values = raw.data.view(np.float32)
    elif raw.qtype == Q.F16:
        values = raw.data.view(np.float16).astype(np.float32)
    else:
        values = quants.dequantize(raw.data, raw.qtype)
    return values.reshape(raw.shape)


def convert_tensor(raw: RawTensor, keep_quantized: bool) -> Converted:
    """The tensor as MLX arrays; `keep_quantized` is False for tensors the model reads unquantized (norms, biases)."""
    if raw.qtype in KEPT and keep_quantized and len(raw.shape) == 2:
        repacked = _repack(raw)
        if all(np.isfinite(v).all() for k, v in repacked.items() if k != "weight"):
            return Converted({k: mx.array(v) for k, v in repacked.items()}, KEPT[raw.qtype])
    if raw.qtype in PLAIN:
        if raw.qtype == Q.BF16:  # numpy has no bfloat16: carry the bits over
            bits = mx.array(raw.data.view(np.uint16).reshape(raw.shape))
            return Converted({"weight": bits.view(mx.bfloat16)}, None)
        dtype = np.float32 if raw.qtype == Q.F32 else np.float16
        return Converted({"weight": mx.array(raw.data.view(dtype).reshape(raw.shape))}, None)
    values = dequantized(raw)
    # float16 holds a dequantized value to 3 significant digits, far finer than any quantization step
    fits = np.isfinite(values).all() and float(np.abs(values).max(initial=0.0)) < _F16_MAX
    return Converted({"weight": mx.array(values.astype(np.float16) if fits else values)}, None)
