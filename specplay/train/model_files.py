"""Build mlx-lm model folders offline: a byte-level BPE tokenizer and random-init models.

Used by the tests (tiny models built in seconds) and as the first step of training demo models.
A folder holds config.json, model.safetensors and the tokenizer files, and loads with
`mlx_lm.load`.
"""

from __future__ import annotations

import glob
import os
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.utils import save_config, save_model

from specplay.backends.mlx import blas  # noqa: F401  (OpenBLAS before mlx.core)
from specplay.files.inputs import TOKENIZER_LIMIT
from specplay.files.json_text import dump_json, read_json

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def stdlib_sources(limit: int | None = None) -> list[Path]:
    """The standard library's top-level modules: source code found on every Python."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    return [Path(f) for f in files[:limit]]


def train_tokenizer(
    texts: Iterable[str],
    out_dir: Path,
    vocab_size: int = 512,
    eos_token: str = "<|endoftext|>",
    chat_template: str | None = None,
) -> None:
    """Byte-level BPE, saved with a hand-written tokenizer_config.json that transformers 4 and 5 read."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()  # mlx-lm then streams with its BPE detokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": eos_token,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": 4096,
    }
    if chat_template:
        config["chat_template"] = chat_template
    (out_dir / "tokenizer_config.json").write_text(dump_json(config, indent=2))


def eos_token_id(tokenizer_dir: Path) -> int:
    config = read_json(tokenizer_dir / "tokenizer_config.json", "tokenizer config")
    vocab = read_json(tokenizer_dir / "tokenizer.json", "tokenizer", TOKENIZER_LIMIT)["model"]["vocab"]
    return int(vocab[config["eos_token"]])


def write_model(
    out_dir: Path, config: dict[str, Any], tokenizer_dir: Path, seed: int = 0, output_scale: float = 1.0
) -> int:
    """A random-init model of `config` (an mlx-lm config.json) with the tokenizer copied in.

    `output_scale` multiplies the output projection: random models otherwise have nearly flat
    next-token distributions. Returns the parameter count.
    """
    from mlx_lm.utils import _get_classes

    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    if output_scale != 1.0:
        head = model.lm_head if hasattr(model, "lm_head") else model.model.embed_tokens
        head.weight = head.weight * output_scale
    mx.eval(model.parameters())
    out_dir.mkdir(parents=True, exist_ok=True)
    save_model(out_dir, model)
    save_config(dict(config, eos_token_id=eos_token_id(tokenizer_dir)), out_dir / "config.json")
    for name in TOKENIZER_FILES:
        (out_dir / name).write_bytes((tokenizer_dir / name).read_bytes())
    return sum(v.size for _, v in tree_flatten(model.parameters()))


def llama_config(
    hidden_size: int,
    num_layers: int,
    vocab_size: int,
    intermediate_size: int | None = None,
    num_heads: int = 4,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "intermediate_size": intermediate_size or 4 * hidden_size,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_heads,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        **extra,
    }


def layer_of(weight_name: str) -> int:
    """The layer index of `model.layers.N.…`; -1 for weights outside the layers."""
    parts = weight_name.split(".")
    return int(parts[2]) if parts[:2] == ["model", "layers"] else -1


def damp_layers(folder: Path, first: int, scale: float) -> None:
    """Scale what layers `first`.. write into the residual stream (attention and MLP outputs), so
    a model cut after layer `first` predicts much as the whole model does."""
    path = str(folder / "model.safetensors")
    weights = mx.load(path)
    for name, value in weights.items():
        if layer_of(name) >= first and name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = value * scale
    mx.save_safetensors(path, weights, metadata={"format": "mlx"})


def read_texts(files: Sequence[Path]) -> list[str]:
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def write_perturbed_copy(src_dir: Path, out_dir: Path, noise: float, seed: int = 0) -> None:
    """A copy of the model in `src_dir` with Gaussian noise, `noise` times each tensor's std,
    added to every weight: a drafter that agrees with the model it copies often, not always."""
    import shutil

    weights = mx.load(str(src_dir / "model.safetensors"))
    key = mx.random.key(seed)
    noisy = {}
    for name, value in sorted(weights.items()):
        key, sub = mx.random.split(key)
        spread = mx.std(value) if value.ndim > 1 else mx.array(0.0)
        noisy[name] = value + noise * spread * mx.random.normal(value.shape, key=sub)
    out_dir.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out_dir / "model.safetensors"), noisy, metadata={"format": "mlx"})
    for name in ("config.json", *TOKENIZER_FILES):
        shutil.copyfile(src_dir / name, out_dir / name)
