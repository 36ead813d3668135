"""A loaded model checked before its first run: weights of types it can compute with, an embedding
that holds every id its tokenizer produces (MLX does not bounds-check a gather: an id past the
table reads whatever memory follows), and a forward pass that completes.

Each refusal names the model (the target or a drafter), so a drafter's fault is never blamed on
the target.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from specplay.errors import ModelError, detail_of

_TOKEN_TABLES = ("embed_tokens", "wte", "tok_embeddings", "word_embeddings", "embeddings", "embedding")
_FORMS = "float32, float16, bfloat16 or mlx-lm quantized"


def who(name: str, location: str) -> str:
    return f"the target ({location})" if name == "target" else f"drafter {name!r} ({location})"


def check_dtypes(name: str, location: str, model: nn.Module) -> None:
    """Floating-point weights everywhere, except the packed words and scales of quantized modules."""
    modules = dict(model.named_modules())
    for path, value in tree_flatten(model.parameters()):
        if mx.issubdtype(value.dtype, mx.floating):
            continue
        owner = modules.get(path.rpartition(".")[0])
        if owner is not None and hasattr(owner, "bits"):  # QuantizedLinear, QuantizedEmbedding, ...
            continue
        raise ModelError(
            f"{who(name, location)} stores {path} as {str(value.dtype).removeprefix('mlx.core.')}, "
            f"which a model cannot compute with; its weights must be {_FORMS}"
        )


def embedding_rows(model: nn.Module) -> int | None:
    """Rows of the model's token embedding (the largest of its embeddings when none is named as one)."""
    tables = [
        (path.rpartition(".")[2] in _TOKEN_TABLES, module.weight.shape[0])
        for path, module in model.named_modules()
        if isinstance(module, nn.Embedding | nn.QuantizedEmbedding)
    ]
    return max(tables)[1] if tables else None


def check_vocabulary(name: str, location: str, model: nn.Module, tokenizer: Any) -> None:
    """Every id the tokenizer can produce has a row in the embedding."""
    rows = embedding_rows(model)
    ids = max(tokenizer.get_vocab().values(), default=-1) + 1
    if rows is not None and ids > rows:
        raise ModelError(
            f"{who(name, location)} has a tokenizer of {ids} ids but an embedding of {rows} rows: "
            "the tokenizer does not belong to these weights; use the model's own tokenizer files"
        )


def check_forward(name: str, location: str, model: nn.Module, cache: list[Any]) -> None:
    """Two tokens through the model with the cache a run gives it (so its attention masks are built
    as in a run): a configuration value of the wrong kind or size fails here, at load, not mid-run."""
    try:
        mx.eval(model(mx.array([[0, 0]]), cache=cache))
    except Exception as exc:
        raise ModelError(
            f"{who(name, location)} cannot run ({detail_of(exc, 160)}); its config.json does not fit its weights: "
            "download or convert the model again"
        ) from exc


def check_loaded(name: str, location: str, model: nn.Module, tokenizer: Any) -> None:
    check_dtypes(name, location, model)
    check_vocabulary(name, location, model, tokenizer)
