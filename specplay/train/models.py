"""Creating, saving and compacting mlx-lm model folders for training."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.utils import _get_classes, dequantize_model, quantize_model, save_config, save_model

from specplay.errors import ConfigError
from specplay.files.json_text import read_json
from specplay.files.outputs import OUTPUTS_RECORD, refuse_link
from specplay.train.model_files import TOKENIZER_FILES, eos_token_id

QUANTIZATION_KEYS = ("quantization", "quantization_config")


def new_model(config: dict[str, Any], seed: int) -> nn.Module:
    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    mx.eval(model.parameters())
    return model


def parameter_count(model: nn.Module) -> int:
    return sum(v.size for _, v in tree_flatten(model.parameters()))


MAX_NEW_PARAMETERS = 2**30
"""A new drafter's size at most: 4 GiB of fp32 weights, three times that while training."""
NOT_TOKENIZER = {"config.json", "model.safetensors.index.json", "distill.json", OUTPUTS_RECORD}
MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "config.json")
"""What save_folder writes besides the tokenizer (a drafter's weights fit one file)."""


def tokenizer_names(tokenizer_dir: Path) -> list[str]:
    """The tokenizer files of a model folder (or of a bare tokenizer folder): everything but
    weights, config and our own records."""
    names = [f.name for f in tokenizer_dir.iterdir() if f.is_file() and f.suffix != ".safetensors"]
    return sorted(set(names) - NOT_TOKENIZER) or list(TOKENIZER_FILES)


def folder_files(tokenizer_dir: Path) -> list[str]:
    """Every file save_folder writes."""
    return [*MODEL_FILES, *tokenizer_names(tokenizer_dir)]


def copy_tokenizer(tokenizer_dir: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in tokenizer_names(tokenizer_dir):
        refuse_link(out_dir / name, "choose another --out, or remove that link")  # copyfile would write its target
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
    return read_json(path / "config.json", "model config")


def new_drafter(
    target: nn.Module, layers: int, width: int, heads: int | None, seed: int
) -> tuple[nn.Module, dict[str, Any]]:
    """A fresh llama drafter for `target` (its vocabulary, context and RoPE base), `layers` deep and
    `width` wide, with tied embeddings; where the widths match, the embedding starts as the
    target's own (a drafter must first learn what the tokens mean, and the target already has)."""
    args = target.args
    vocab = int(args.vocab_size)
    heads = heads or max(1, width // 64)
    if width % heads:
        raise ValueError(f"the drafter's width {width} is not a multiple of its {heads} heads; choose heads=H")
    parameters = vocab * width + layers * 16 * width * width  # embedding, attention 4w², MLP 3·4w²
    if parameters > MAX_NEW_PARAMETERS:
        raise ConfigError(
            "new_drafter",
            f"of {layers} layers x {width} over a vocabulary of {vocab} would hold {parameters:.3g} parameters, "
            f"more than specplay builds ({MAX_NEW_PARAMETERS:.3g}); choose fewer layers or a smaller width",
        )
    config = {
        "model_type": "llama",
        "hidden_size": width,
        "num_hidden_layers": layers,
        "intermediate_size": 4 * width,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "rms_norm_eps": float(getattr(args, "rms_norm_eps", 1e-5)),
        "vocab_size": vocab,
        "max_position_embeddings": int(getattr(args, "max_position_embeddings", 2048) or 2048),
        "rope_theta": float(getattr(args, "rope_theta", 10000.0)),
        "tie_word_embeddings": True,
    }
    model = new_model(config, seed)
    embedding = target.model.embed_tokens.weight
    if embedding.shape == model.model.embed_tokens.weight.shape:
        model.model.embed_tokens.weight = mx.array(embedding).astype(mx.float32)
        mx.eval(model.parameters())
    return model, config
