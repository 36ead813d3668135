"""Write the mlx-lm folder of a GGUF file: config.json, safetensors weights and the tokenizer files."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from specplay.backends.mlx.gguf.config import model_config
from specplay.backends.mlx.gguf.names import LAYOUTS, Layout, heads_of, is_norm, mlx_path, unpermute
from specplay.backends.mlx.gguf.reader import USE_FOLDER, GGUFFile, RawTensor
from specplay.backends.mlx.gguf.tensors import GROUP_SIZE, SUPPORTED, convert_tensor
from specplay.backends.mlx.gguf.tokenizer import tokenizer_files, write_tokenizer
from specplay.errors import ModelError, detail_of
from specplay.files.json_text import dump_json

Progress = Callable[[str, int, int], None]
SHARD_BYTES = 2 * 2**30
"""Weights are written in shards of about this size, so converting holds at most one shard in memory."""


def _check_types(gguf: GGUFFile) -> None:
    unsupported = sorted({t.qtype.name for t in gguf.tensors.values() if t.qtype not in SUPPORTED})
    if unsupported:
        raise ModelError(
            f"{gguf.path} stores tensors as {', '.join(unsupported)}, which this converter cannot read; "
            "use a GGUF file quantized as F16, BF16, Q8_0, Q4_0, Q4_1 or a K-quant (Q4_K_M, Q6_K, ...)"
        )


def _quantization(bits: dict[str, int]) -> dict[str, Any] | None:
    """mlx-lm's quantization entry: the commonest bits for all, and an entry for each module that differs."""
    if not bits:
        return None
    common = Counter(bits.values()).most_common(1)[0][0]
    config: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": common, "mode": "affine"}
    for module, b in sorted(bits.items()):
        if b != common:
            config[module] = {"group_size": GROUP_SIZE, "bits": b, "mode": "affine"}
    return config


class _ShardWriter:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pending: dict[str, mx.array] = {}
        self.files: list[Path] = []

    def add(self, name: str, array: mx.array) -> None:
        self.pending[name] = array
        if sum(a.nbytes for a in self.pending.values()) >= SHARD_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            file = self.folder / f"model-{len(self.files) + 1:05d}.safetensors"
            try:
                mx.save_safetensors(str(file), self.pending, metadata={"format": "mlx"})
            except RuntimeError as exc:  # MLX reports a failed write (a full disk) as RuntimeError
                raise OSError(f"cannot write {file.name}: {detail_of(exc, 120)}") from exc
            self.files.append(file)
            self.pending = {}

    def close(self) -> None:
        self.flush()
        if len(self.files) == 1:
            self.files[0].rename(self.folder / "model.safetensors")


def _converted(
    gguf: GGUFFile, raw: RawTensor, layout: Layout, config: dict[str, Any]
) -> tuple[str, dict[str, mx.array], int | None] | None:
    """(module path, its arrays by parameter name, quantization bits) of one tensor; None for a tensor
    that is configuration, not a weight."""
    try:
        target = mlx_path(layout, raw.name)
    except KeyError:
        raise ModelError(
            f"{gguf.path} has a tensor {raw.name} mlx-lm's {config['model_type']} has no place for; {USE_FOLDER}"
        ) from None
    if target is None:
        return None
    module, kind = target
    converted = convert_tensor(raw, keep_quantized=kind == "weight" and not is_norm(module))
    arrays = converted.arrays if kind == "weight" else {"bias": converted.arrays["weight"]}
    heads = heads_of(module, config["num_attention_heads"], config["num_key_value_heads"])
    if layout.permuted_qk and heads:
        arrays = {suffix: unpermute(a, heads) for suffix, a in arrays.items()}
    if layout.norm_plus_one and is_norm(module):
        arrays = {suffix: a - 1 for suffix, a in arrays.items()}
    return module, arrays, converted.bits


def write_folder(gguf: GGUFFile, folder: Path, on_progress: Progress | None = None) -> dict[str, Any]:
    """Convert `gguf` into `folder` (which exists and is empty). Returns the config written."""
    config = model_config(gguf)
    tokenizer = tokenizer_files(gguf, config["max_position_embeddings"])
    _check_types(gguf)
    layout = LAYOUTS[gguf.architecture]
    writer = _ShardWriter(folder)
    bits: dict[str, int] = {}
    tensors = sorted(gguf.tensors.values(), key=lambda t: t.name)
    for done, raw in enumerate(tensors, start=1):
        if (converted := _converted(gguf, raw, layout, config)) is not None:
            module, arrays, module_bits = converted
            for suffix, array in arrays.items():
                writer.add(f"{module}.{suffix}", array)
            if module_bits is not None:
                bits[module] = module_bits
        if on_progress:
            on_progress("converting", done, len(tensors))
    writer.close()
    if quantization := _quantization(bits):
        config["quantization"] = quantization
    if ends := tokenizer.eos_token_ids:
        config["eos_token_id"] = ends[0] if len(ends) == 1 else ends
    if tokenizer.bos_token_id is not None:
        config["bos_token_id"] = tokenizer.bos_token_id
    (folder / "config.json").write_text(dump_json(config, indent=2))
    write_tokenizer(tokenizer, folder)
    return config


def check_loads(folder: Path, gguf: Path) -> None:
    """Load the folder as specplay will (lazily: names and shapes, not values), so no broken folder is kept."""
    from mlx_lm import load

    try:
        load(str(folder), lazy=True)
    except Exception as exc:
        detail = detail_of(exc)
        raise ModelError(f"{gguf} converts to a model mlx-lm cannot load ({detail}); {USE_FOLDER}") from exc
