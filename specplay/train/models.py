"""Creating, saving and compacting mlx-lm model folders for training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.utils import _get_classes, dequantize_model, quantize_model, save_config, save_model

from specplay.backends.mlx.build import TOKENIZER_FILES, eos_token_id

QUANTIZATION_KEYS = ("quantization", "quantization_config")


def new_model(config: dict[str, Any], seed: int) -> nn.Module:
    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    mx.eval(model.parameters())
    return model


def parameter_count(model: nn.Module) -> int:
    return sum(v.size for _, v in tree_flatten(model.parameters()))


NOT_TOKENIZER = {"config.json", "model.safetensors.index.json", "distill.json"}


def copy_tokenizer(tokenizer_dir: Path, out_dir: Path) -> None:
    """The tokenizer files of a model folder (or of a bare tokenizer folder): everything but
    weights, config and our own records."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in tokenizer_dir.iterdir() if f.is_file() and f.suffix != ".safetensors"]
    for name in sorted(set(names) - NOT_TOKENIZER) or TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out_dir / name)


def save_folder(
    out_dir: Path, model: nn.Module, config: dict[str, Any], tokenizer_dir: Path, storage: str = "float32"
) -> None:
    """An mlx-lm folder that `mlx_lm.load` reads. storage: float32, float16, or int8 (affine,
    group 64: about a quarter of fp32's bytes; specplay upcasts it back to fp32 at load on CPU)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in config.items() if k not in QUANTIZATION_KEYS}
    config.setdefault("eos_token_id", eos_token_id(tokenizer_dir))
    if storage == "int8":
        model, config = quantize_model(model, config, group_size=64, bits=8)
    elif storage == "float16":
        model.set_dtype(mx.float16)
    elif storage != "float32":
        raise ValueError(f"unknown storage {storage!r}: use float32, float16 or int8")
    save_model(out_dir, model)
    save_config(config, out_dir / "config.json")
    copy_tokenizer(tokenizer_dir, out_dir)


def load_folder(path: Path) -> tuple[nn.Module, dict[str, Any]]:
    """A folder's model in fp32, dequantized if stored in int8: the exact weights specplay runs."""
    from mlx_lm.utils import load_model

    model, config = load_model(path)
    if "quantization" in config:
        model = dequantize_model(model)
        config = {k: v for k, v in config.items() if k not in QUANTIZATION_KEYS}
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model, config


def read_config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())
