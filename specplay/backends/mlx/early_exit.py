"""Early exit: the target's first L layers, read out through its own final norm and output head.

Self-speculation as in LayerSkip and Draft & Verify. The drafter holds the target's own layer
modules, so no weight is copied; it keeps its own rewindable KV cache for those L layers. An
optional exit head (a small residual adapter on layer L's output, the identity when untrained)
closes some of the gap between layer L and the last layer; `specplay.train.exit_head` trains it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.base import create_attention_mask

from specplay.drafters.early_exit import HEAD_MLP_LIMIT
from specplay.errors import ModelError, SpecplayError, detail_of
from specplay.files.json_text import dump_json, read_json

SPLITTABLE = {"mlx_lm.models.llama": "llama", "mlx_lm.models.qwen2": "qwen2", "mlx_lm.models.qwen3": "qwen3"}
"""Model modules whose forward pass is embed -> layers(h, mask, cache) -> norm -> output head,
with nothing between the layers (mistral and others load as llama)."""
HEAD_WEIGHTS = "exit_head.safetensors"
HEAD_CONFIG = "exit_head.json"
HEAD_FORMAT = "specplay-exit-head"


class LayerSplit:
    """A llama-family mlx-lm model as embed -> layers -> norm -> head, run a range of layers at a time."""

    def __init__(self, model: nn.Module, label: str) -> None:
        inner = getattr(model, "model", None)
        parts = ("embed_tokens", "layers", "norm")
        if type(model).__module__ not in SPLITTABLE or not all(hasattr(inner, part) for part in parts):
            model_type = getattr(model, "model_type", type(model).__module__.rsplit(".", 1)[-1])
            raise ModelError(
                f"{label} is a {model_type!r} model, which early exit cannot split: it needs a llama-family "
                f"model ({', '.join(sorted(set(SPLITTABLE.values())))}, mistral); use a model drafter instead"
            )
        self.model, self.inner = model, inner
        self.layers: list[nn.Module] = list(inner.layers)
        self.sliding_window: int | None = getattr(inner, "sliding_window", None)
        args = getattr(model, "args", None)
        tied = getattr(args, "tie_word_embeddings", not hasattr(model, "lm_head"))
        self.output = inner.embed_tokens.as_linear if tied else model.lm_head
        self.hidden_size = int(inner.norm.weight.shape[0])

    def embed(self, inputs: mx.array) -> mx.array:
        return self.inner.embed_tokens(inputs)

    def run(
        self, h: mx.array, start: int, stop: int, cache: list[Any] | None = None, mask: mx.array | None = None
    ) -> mx.array:
        """Layers start..stop-1 on hidden states h [batch, tokens, hidden], with their caches if
        given; `mask`: one for every layer (a draft tree's), else the model's own."""
        layers = self.layers[start:stop]
        caches = cache if cache is not None else [None] * len(layers)
        if mask is not None:
            for layer, layer_cache in zip(layers, caches, strict=True):
                h = layer(h, mask, layer_cache)
            return h
        # As the model builds them: one mask for full-attention layers and one for sliding-window
        # layers, from a cache of that kind (all of a sequence's caches hold as many tokens).
        masks: dict[bool, Any] = {}
        for layer, layer_cache in zip(layers, caches, strict=True):
            sliding = bool(getattr(layer, "use_sliding", False))
            if sliding not in masks:
                masks[sliding] = create_attention_mask(h, layer_cache, self.sliding_window if sliding else None)
        for layer, layer_cache in zip(layers, caches, strict=True):
            h = layer(h, masks[bool(getattr(layer, "use_sliding", False))], layer_cache)
        return h

    def logits(self, h: mx.array) -> mx.array:
        """The target's own final norm and output head."""
        return self.output(self.inner.norm(h))


class ExitHead(nn.Module):
    """h + W h (mlp_size 0), or h + W2 silu(W1 h): a residual adapter on layer L's output, zero at
    initialisation so an untrained head is the plain early exit (and weight decay pulls toward it)."""

    def __init__(self, hidden_size: int, mlp_size: int = 0) -> None:
        super().__init__()
        self.hidden_size, self.mlp_size = hidden_size, mlp_size
        if mlp_size:
            self.up = nn.Linear(hidden_size, mlp_size, bias=False)
            self.down = nn.Linear(mlp_size, hidden_size, bias=False)
            self.down.weight = mx.zeros_like(self.down.weight)
        else:
            self.proj = nn.Linear(hidden_size, hidden_size, bias=False)
            self.proj.weight = mx.zeros_like(self.proj.weight)

    def __call__(self, h: mx.array) -> mx.array:
        if self.mlp_size:
            return h + self.down(nn.silu(self.up(h)))
        return h + self.proj(h)


class EarlyExitModel:
    """Called as an mlx-lm model is, `model(inputs, cache=...)`, with a cache of `layers` entries.

    Not an nn.Module: it owns no parameters of its own but the head's, so nothing here can be
    mistaken for a second copy of the target's weights."""

    def __init__(self, split: LayerSplit, layers: int, head: ExitHead | None = None) -> None:
        self.split, self.layers, self.head = split, layers, head

    def __call__(self, inputs: mx.array, cache: list[Any] | None = None) -> mx.array:
        h = self.split.run(self.split.embed(inputs), 0, self.layers, cache)
        if self.head is not None:
            h = self.head(h)
        return self.split.logits(h)

    def own_parameters(self) -> int:
        """Parameters this drafter adds to the target's: the exit head's, if any."""
        return 0 if self.head is None else sum(v.size for _, v in tree_flatten(self.head.parameters()))


def check_layers(layers: int, split: LayerSplit, label: str) -> None:
    """1 <= layers <= the target's layers - 1, or one line naming both; `label` says whose."""
    total = len(split.layers)
    if total < 2:
        raise ModelError(f"{label}: the target has {total} layer, none to skip; early exit needs 2 or more")
    if not 1 <= layers <= total - 1:
        raise ModelError(
            f"{label}: layers={layers} is out of range; the target has {total} layers, so use 1..{total - 1}"
        )


def save_exit_head(out: Path, head: ExitHead, layers: int, record: Mapping[str, Any] | None = None) -> None:
    """`out`/exit_head.safetensors and exit_head.json (what the head is, for which target, and the
    weights' sha256), each written beside and renamed into place. A save killed between the two
    leaves new weights under an old config, which loading refuses by the hash."""
    out.mkdir(parents=True, exist_ok=True)
    partial = out / f".{os.getpid()}.tmp.{HEAD_WEIGHTS}"
    try:
        mx.save_safetensors(str(partial), dict(tree_flatten(head.parameters())), metadata={"format": "mlx"})
        weights_sha256 = hashlib.sha256(partial.read_bytes()).hexdigest()
        os.replace(partial, out / HEAD_WEIGHTS)
    finally:
        partial.unlink(missing_ok=True)
    config = {
        "format": HEAD_FORMAT,
        "version": 1,
        "layers": layers,
        "hidden_size": head.hidden_size,
        "mlp_size": head.mlp_size,
        "weights_sha256": weights_sha256,
        **(record or {}),
    }
    partial = out / f".{os.getpid()}.tmp.{HEAD_CONFIG}"
    try:
        partial.write_text(dump_json(config, indent=2) + "\n")
        os.replace(partial, out / HEAD_CONFIG)
    finally:
        partial.unlink(missing_ok=True)


def load_exit_head(folder: Path, layers: int, split: LayerSplit, target_identity: Mapping[str, str]) -> ExitHead:
    """A trained head, refused unless it was made for this target, this exit layer and this width."""
    weights_path = folder / HEAD_WEIGHTS
    if not (folder / HEAD_CONFIG).is_file() or not weights_path.is_file():
        raise ModelError(f"exit head {str(folder)!r} not found: it needs {HEAD_CONFIG} and {HEAD_WEIGHTS}")
    config = read_head_config(folder)
    if config.layers != layers:
        raise ModelError(
            f"exit head {str(folder)!r} was trained after layer {config.layers}, not {layers}; "
            f"use layers={config.layers} or train a head for layer {layers}"
        )
    if config.hidden_size != split.hidden_size:
        raise ModelError(
            f"exit head {str(folder)!r} is {config.hidden_size} wide but the target is {split.hidden_size}; "
            "it was trained for another model"
        )
    trained_on = config.target_sha256
    if trained_on and trained_on != target_identity.get("weights_sha256"):
        raise ModelError(
            f"exit head {str(folder)!r} was trained on other target weights (sha256 {trained_on[:12]}, "
            f"this target's {str(target_identity.get('weights_sha256'))[:12]}); train one for this target"
        )
    saved = config.weights_sha256
    if saved and saved != hashlib.sha256(weights_path.read_bytes()).hexdigest():
        raise ModelError(
            f"exit head {str(folder)!r}: {HEAD_WEIGHTS} is not the file {HEAD_CONFIG} describes "
            "(a save was cut short, or one file was replaced); train the head again"
        )
    head = ExitHead(split.hidden_size, config.mlp_size)
    try:
        head.load_weights(str(weights_path), strict=True)
    except Exception as exc:
        detail = detail_of(exc)
        raise ModelError(f"exit head {str(folder)!r}: its weights do not fit its config ({detail})") from None
    head.set_dtype(split.inner.norm.weight.dtype)
    mx.eval(head.parameters())
    return head


def head_identity(folder: Path) -> dict[str, Any]:
    """What a session records of a head: where it is and hashes of its files."""
    digest = hashlib.sha256()
    for name in (HEAD_CONFIG, HEAD_WEIGHTS):
        digest.update((folder / name).read_bytes())
    mlp_size = read_head_config(folder).mlp_size
    return {"path": str(folder.resolve()), "sha256": digest.hexdigest(), "mlp_size": mlp_size}


# --- exit_head.json, read back --------------------------------------------------------------

HEAD_VERSION = 1
LAYER_LIMIT = 4096  # far beyond any model's layers: a larger number is damage, not a deep model
HIDDEN_LIMIT = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
DISTILL_HEAD = "`specplay distill --exit-head`"
RETRAIN_HEAD = f"train the head again with {DISTILL_HEAD}"


@dataclass(frozen=True)
class HeadConfig:
    """What exit_head.json says of its head, every field checked (the rest of it is a record for people)."""

    layers: int
    hidden_size: int
    mlp_size: int
    weights_sha256: str | None
    """Of exit_head.safetensors, as saved (None: not recorded)."""
    target_sha256: str | None
    """Of the target's weights it was trained on (None: not recorded)."""


def read_head_config(folder: Path) -> HeadConfig:
    """`folder`/exit_head.json, size- and depth-bounded and checked field by field; any fault is one
    ModelError naming the file, the field and the fix."""
    where = f"exit head {str(folder)!r}: {HEAD_CONFIG}"
    try:
        record = read_json(folder / HEAD_CONFIG, HEAD_CONFIG)
    except SpecplayError as error:  # too large, not JSON, nested too deep: the error names the file
        raise ModelError(f"exit head {str(folder)!r}: {detail_of(error)}; {RETRAIN_HEAD}") from None
    if not isinstance(record, dict) or record.get("format") != HEAD_FORMAT:
        raise ModelError(f"{where} is not a specplay exit head; give a folder that {DISTILL_HEAD} wrote")
    version = record.get("version", HEAD_VERSION)
    if _whole(version, 1, None) and version > HEAD_VERSION:
        raise ModelError(f"{where} is of version {version}, newer than this specplay reads; upgrade specplay")
    try:
        return head_config(record)
    except ValueError as error:
        raise ModelError(f"{where}: {error}; {RETRAIN_HEAD}") from None


def head_config(record: Mapping[str, Any]) -> HeadConfig:
    """The checked fields of an exit_head.json record; a ValueError says which one is wrong."""
    if not _whole(record.get("version", HEAD_VERSION), 1, None):
        raise ValueError("its version is not a whole number of at least 1")
    target = record.get("target")
    if target is not None and not isinstance(target, dict):
        raise ValueError(f"its target is {_shown(target)}, not an object")
    return HeadConfig(
        layers=_bounded(record, "layers", 1, LAYER_LIMIT),
        hidden_size=_bounded(record, "hidden_size", 1, HIDDEN_LIMIT),
        mlp_size=_bounded(record, "mlp_size", 0, HEAD_MLP_LIMIT, default=0),
        weights_sha256=_sha256(record, "weights_sha256", "its weights_sha256"),
        target_sha256=_sha256(target or {}, "weights_sha256", "its target's weights_sha256"),
    )


def _whole(value: Any, low: int, high: int | None) -> bool:
    """Whether `value` is a whole number (not a bool) in low..high."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return low <= value and (high is None or value <= high)


def _bounded(record: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None) -> int:
    value = record.get(name)
    if value is None and default is not None:  # older heads without an MLP wrote none
        return default
    if not _whole(value, low, high):
        raise ValueError(f"its {name} is {_shown(value)}, not a whole number from {low} to {high}")
    return value


def _sha256(record: Mapping[str, Any], name: str, label: str) -> str | None:
    value = record.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"{label} is {_shown(value)}, not a sha256 (64 hex digits)")
    return value


def _shown(value: Any) -> str:
    """A wrong value, short, for an error line (a hostile file's may be long)."""
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "a list"
    if value is None:
        return "missing"
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a number of over 30 digits"
    return text if len(text) <= 40 else text[:37] + "..."
