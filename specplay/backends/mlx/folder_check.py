"""A model folder checked before mlx-lm builds anything from it.

Its config.json is read once (bounded in size and depth), its model type must name one of mlx-lm's
own modules, and each value the architecture's arguments declare a type for must have that type.
The safetensors headers are held against the bytes present (each tensor's shape against its
extent, every extent inside its file), and the layer count the config declares against the layers
the weights hold: a two-megabyte folder claiming a billion layers is refused here, in one line,
instead of building a billion modules.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import struct
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specplay.errors import ModelError
from specplay.files.inputs import CONFIG_LIMIT, TOKENIZER_LIMIT
from specplay.files.json_text import parse_json, read_json

HEADER_LIMIT = 100 * 2**20
"""The largest safetensors header the format allows."""
WEIGHT_FILES = "model*.safetensors"
"""The weight files mlx-lm loads from a folder."""
MODEL_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
"""A model type is a module name of mlx-lm's: no dots, slashes or other path syntax."""
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
    "C64": 8,
}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")


@dataclass(frozen=True)
class TensorInfo:
    file: str
    dtype: str
    shape: tuple[int, ...]


def _damaged(location: str, what: str) -> ModelError:
    return ModelError(f"model {location!r}: {what}; download or convert the model again")


def read_config(location: str, path: Path) -> dict[str, Any]:
    """The folder's config.json as a dict, or a one-line refusal."""
    file = path / "config.json"
    try:
        with file.open("rb") as handle:
            data = handle.read(CONFIG_LIMIT + 1)
    except OSError as exc:
        raise ModelError(f"cannot read {file}: {exc.strerror or exc}; check the folder and its permissions") from None
    if len(data) > CONFIG_LIMIT:
        raise _damaged(location, f"its config.json is over {CONFIG_LIMIT // 2**20} MiB, not a model configuration")
    try:
        config = parse_json(data, f"{file}")
    except (ValueError, RecursionError):
        config = None
    if not isinstance(config, dict):
        raise ModelError(
            f"model {location!r} has a config.json that is not a JSON object; re-download or re-convert it"
        )
    return config


def architecture_module(location: str, config: dict[str, Any]) -> str:
    """The mlx-lm module that builds this config's model, or a refusal naming why there is none."""
    from mlx_lm.utils import MODEL_REMAPPING

    model_type = config.get("model_type", "")
    if not isinstance(model_type, str) or not MODEL_TYPE.match(model_type):
        raise _damaged(location, f"its model_type {str(model_type)[:80]!r} is not an architecture name")
    module = MODEL_REMAPPING.get(model_type, model_type).replace("-", "_")
    if importlib.util.find_spec(f"mlx_lm.models.{module}") is None:
        remote = "auto_map" in config
        why = "needs remote code (its own Python files)" if remote else "is not an architecture mlx-lm implements"
        raise ModelError(
            f"model {location!r} of type {model_type!r} {why}; specplay runs only mlx-lm's own architectures"
        )
    return module


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a JSON value has the type an architecture's argument declares (unknown kinds pass)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool | int)
    if annotation in (int, float):  # either kind of number: some architectures type a ratio as int
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if annotation is str:
        return isinstance(value, str)
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(annotation) or (Any,)
        return all(_fits(v, item) for v in value)
    if origin is dict and isinstance(value, dict):
        _, item = typing.get_args(annotation) or (Any, Any)
        return all(_fits(v, item) for v in value.values())
    return origin not in (list, dict)  # a list or table where the argument wants one is wrong


def check_config_types(location: str, config: dict[str, Any], module: str) -> None:
    """Each config value the architecture's ModelArgs types (a number, a flag, a name) has that type."""
    import importlib

    try:
        hints = typing.get_type_hints(importlib.import_module(f"mlx_lm.models.{module}").ModelArgs)
    except Exception:  # an architecture whose arguments cannot be introspected is left to mlx-lm
        return
    for key, annotation in hints.items():
        if key in config and not _fits(config[key], annotation):
            shown = json.dumps(config[key])[:60]
            raise _damaged(location, f"its config.json gives {key} as {shown}, which is not {_named(annotation)}")


def _named(annotation: Any) -> str:
    names = {int: "a number", float: "a number", bool: "true or false", str: "a string"}
    arms = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return " or ".join(names.get(a, "a " + getattr(a, "__name__", str(a)).lower()) for a in arms)


def _file_tensors(location: str, file: Path) -> dict[str, TensorInfo]:
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            head = handle.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 2 <= length <= min(HEADER_LIMIT, size - 8):
                raise _damaged(location, f"{file.name} is not a whole safetensors file ({size} bytes)")
            header = parse_json(handle.read(length), f"{file.name}'s header")
    except OSError as exc:
        raise ModelError(f"cannot read {file}: {exc.strerror or exc}; check the folder and its permissions") from None
    except (ValueError, RecursionError):
        raise _damaged(location, f"{file.name} has a safetensors header that is not JSON") from None
    if not isinstance(header, dict):
        raise _damaged(location, f"{file.name} has a safetensors header that is not a JSON object")
    data_bytes = size - 8 - length
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(location, file, name, entry, data_bytes)
    return tensors


def _tensor(location: str, file: Path, name: str, entry: Any, data_bytes: int) -> TensorInfo:
    shown = f"{file.name}: tensor {name[:80]!r}"
    dtype = entry.get("dtype") if isinstance(entry, dict) else None
    shape = entry.get("shape") if isinstance(entry, dict) else None
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    whole = lambda n: isinstance(n, int) and not isinstance(n, bool) and n >= 0  # noqa: E731
    if dtype not in DTYPE_BYTES or not isinstance(shape, list) or not all(whole(n) for n in shape):
        raise _damaged(location, f"{shown} has no valid dtype and shape")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(whole(n) for n in offsets):
        raise _damaged(location, f"{shown} has no valid data offsets")
    begin, end = offsets
    if not begin <= end <= data_bytes:
        raise _damaged(location, f"{shown} lies past the end of the file (truncated?)")
    needed = math.prod(shape) * DTYPE_BYTES[dtype]
    if needed != end - begin:
        raise _damaged(location, f"{shown} declares shape {shape[:8]} ({needed} bytes) but holds {end - begin} bytes")
    return TensorInfo(file.name, dtype, tuple(shape))


def read_tensors(location: str, path: Path) -> dict[str, TensorInfo]:
    """Every tensor of the folder's weight files, by name, each checked against the bytes it holds."""
    tensors: dict[str, TensorInfo] = {}
    for file in sorted(path.glob(WEIGHT_FILES)):
        tensors |= _file_tensors(location, file)
    return tensors


def check_layers(location: str, config: dict[str, Any], tensors: dict[str, TensorInfo]) -> None:
    """The layers the config declares (at its top or in its text model's config) must be in the
    weights: each is a module mlx-lm builds."""
    held = {int(m.group(1)) for name in tensors if (m := _LAYER.search(name))}
    for part in (config, config.get("text_config")):
        declared = [(k, part[k]) for k in LAYER_KEYS if isinstance(part, dict) and k in part]
        for key, count in declared:
            if isinstance(count, int | float) and not isinstance(count, bool) and count > len(held):
                raise _damaged(
                    location, f"its config.json declares {key} {count} but its weights hold {len(held)} layers"
                )


def check_json_files(location: str, path: Path) -> None:
    """The JSON files mlx-lm, transformers and the tokenizer read whole are bounded in size before
    any is read; those Python parses (all but tokenizer.json, which the tokenizer library parses
    with a depth limit of its own) are read through the bounded reader, so none nests past its depth."""
    for file in sorted(path.glob("*.json")):
        limit = TOKENIZER_LIMIT if file.name == "tokenizer.json" else CONFIG_LIMIT
        try:
            size = file.stat().st_size
        except OSError:
            continue  # a dangling link: whoever reads it says so
        if size > limit:
            over = f"its {file.name} is {size // 2**20} MiB, more than any model's ({limit // 2**20} MiB)"
            raise _damaged(location, over)
        if file.name not in ("tokenizer.json", "config.json"):  # config.json: read_config reads it
            try:
                read_json(file, file.name, limit)
            except (OSError, ValueError) as error:
                raise ModelError(f"model {location!r}: {error}; download or convert the model again") from None


def check_folder(location: str, path: Path) -> dict[str, Any]:
    """Everything above, in the order that refuses cheapest first; returns the config."""
    check_json_files(location, path)
    config = read_config(location, path)
    module = architecture_module(location, config)
    check_config_types(location, config, module)
    check_layers(location, config, read_tensors(location, path))
    return config
