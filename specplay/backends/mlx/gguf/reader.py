"""Open a GGUF file: its metadata as plain Python values and its tensors as raw bytes, checked whole.

The header is parsed here, with struct over a memory map: the gguf package's reader builds numpy views of
every vocabulary string and takes seconds on a 50k-token vocabulary, where this takes milliseconds. Tensor
data stays memory-mapped until converted.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specplay.errors import ModelError, detail_of

MAGIC = b"GGUF"
USE_FOLDER = "use the model's mlx-lm folder instead"
"""The way out of every refusal for a model GGUF conversion cannot express."""
DEFAULT_ALIGNMENT = 32
MAX_NESTING = 8
"""Arrays of arrays deeper than this are no model's metadata (llama.cpp writes at most two levels)."""
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_NUMPY = {code: np.dtype("<" + fmt) for code, fmt in _SCALARS.items() if code != 7} | {7: np.dtype(np.bool_)}


@dataclass(frozen=True)
class RawTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    """Logical shape, outermost first (rows, columns), as numpy and MLX order it."""
    data: np.ndarray
    """The stored bytes, one row of blocks per row of the tensor: (rows, bytes per row), uint8."""


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, RawTensor]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """`<architecture>.<key>` from the metadata."""
        return self.metadata.get(f"{self.architecture}.{key}", default)


class _Truncated(Exception):
    pass


class _Cursor:
    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer = buffer
        self.at = 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.buffer):
            raise _Truncated
        (value,) = struct.unpack_from(fmt, self.buffer, self.at)
        self.at += size
        return value

    def string(self) -> str:
        size = self.take("<Q")
        if self.at + size > len(self.buffer):
            raise _Truncated
        text = self.buffer[self.at : self.at + size].decode("utf-8", errors="replace")
        self.at += size
        return text

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            if depth >= MAX_NESTING:
                raise ValueError(f"metadata arrays nested over {MAX_NESTING} deep")
            item, count = self.take("<I"), self.take("<Q")
            if item == _STRING:
                return [self.string() for _ in range(count)]
            if item in _NUMPY:  # vocabulary-sized lists (scores, token types) as arrays
                size = _NUMPY[item].itemsize * count
                if self.at + size > len(self.buffer):
                    raise _Truncated
                values = np.frombuffer(self.buffer, _NUMPY[item], count, self.at).copy()
                self.at += size
                return values
            return [self.value(item, depth + 1) for _ in range(count)]
        if kind not in _SCALARS:
            raise ValueError(f"unknown metadata type {kind}")
        value = self.take("<" + _SCALARS[kind])
        # 1e-05, not the 9.999999747378752e-06 a float32 widens to
        return float(str(np.float32(value))) if kind == 6 else value


def check_magic(path: Path) -> None:
    """Refuse, cheaply, a file that is not GGUF at all."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from exc
    if magic != MAGIC:
        raise ModelError(f"{path} is not a GGUF file (it does not start with 'GGUF'); pass a .gguf model file")


def _parse(path: Path, buffer: mmap.mmap) -> GGUFFile:
    cursor = _Cursor(buffer)
    cursor.at = 4
    version = cursor.take("<I")
    if version not in (2, 3):
        raise ModelError(f"{path} is GGUF version {version}; convert it again with a current llama.cpp (v2 or v3)")
    tensor_count, kv_count = cursor.take("<Q"), cursor.take("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.take("<I"))
    infos = []
    for _ in range(tensor_count):
        name = cursor.string()
        dims = [cursor.take("<Q") for _ in range(cursor.take("<I"))]
        infos.append((name, dims, cursor.take("<I"), cursor.take("<Q")))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"general.alignment is {alignment!r}, not a whole number of 1 or more")
    start = -(-cursor.at // alignment) * alignment
    tensors: dict[str, RawTensor] = {}
    for name, dims, kind, offset in infos:
        try:
            qtype = GGMLQuantizationType(kind)
            block, block_bytes = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ModelError(
                f"{path} stores tensor {name} in GGML type {kind}, which this converter cannot read; "
                "use a GGUF file quantized as F16, BF16, Q8_0, Q4_0, Q4_1 or a K-quant"
            ) from None
        shape = tuple(int(n) for n in reversed(dims)) or (1,)
        # Exact integers: a hostile shape must not wrap around int64 into a size that fits the file.
        rows = math.prod(shape[:-1])
        if shape[-1] % block:
            raise ValueError(f"tensor {name} has rows of {shape[-1]} values, not whole blocks of {block}")
        row_bytes = shape[-1] // block * block_bytes
        end = start + offset + rows * row_bytes
        if end > len(buffer):
            raise _Truncated
        data = np.frombuffer(buffer, np.uint8, rows * row_bytes, start + offset).reshape(rows, row_bytes)
        tensors[name] = RawTensor(name, qtype, shape, data)
    return GGUFFile(path, metadata, tensors)


def read_gguf(path: Path) -> GGUFFile:
    """The file's metadata and tensors (memory-mapped), or a ModelError naming what is wrong with it."""
    check_magic(path)
    try:
        with path.open("rb") as handle:
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from exc
    try:
        return _parse(path, buffer)
    except _Truncated:
        raise ModelError(
            f"{path} is truncated ({len(buffer)} bytes, cut inside its header or tensor data); "
            "download the GGUF file again"
        ) from None
    except (ValueError, OverflowError, TypeError) as exc:
        raise ModelError(f"{path} is damaged ({detail_of(exc, 120)}); download the GGUF file again") from exc
