"""Open a GGUF file: its metadata as plain Python values and its tensors as raw bytes, checked whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from specplay.errors import ModelError

MAGIC = b"GGUF"


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


def _value(field: Any) -> Any:
    """A field's value: numeric arrays come back as numpy arrays (vocabulary-sized lists are large)."""
    types = field.types
    if types and types[0] == GGUFValueType.ARRAY and types[-1] not in (GGUFValueType.STRING, GGUFValueType.ARRAY):
        if not field.data:
            return np.zeros(0)
        return np.concatenate([np.asarray(field.parts[i]).reshape(-1) for i in field.data])
    value = field.contents()
    if types == [GGUFValueType.FLOAT32]:  # 1e-05, not the 9.999999747378752e-06 a float32 widens to
        return float(str(np.float32(value)))
    return value.item() if isinstance(value, np.generic) else value


def _tensor(tensor: Any) -> RawTensor:
    shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    data = np.asarray(tensor.data).reshape(-1).view(np.uint8).reshape(rows, -1)
    return RawTensor(tensor.name, GGMLQuantizationType(int(tensor.tensor_type)), shape, data)


def check_magic(path: Path) -> None:
    """Refuse, cheaply, a file that is not GGUF at all."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from exc
    if magic != MAGIC:
        raise ModelError(f"{path} is not a GGUF file (it does not start with 'GGUF'); pass a .gguf model file")


def read_gguf(path: Path) -> GGUFFile:
    """The file's metadata and tensors (memory-mapped), or a ModelError naming what is wrong with it."""
    check_magic(path)
    size = path.stat().st_size
    try:
        reader = GGUFReader(path)
        metadata = {name: _value(field) for name, field in reader.fields.items()}
        tensors = {t.name: _tensor(t) for t in reader.tensors}
        end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    except (ValueError, IndexError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise ModelError(
            f"{path} is truncated or damaged ({' '.join(str(exc).split())[:120]}); download the GGUF file again"
        ) from exc
    if end > size:
        raise ModelError(f"{path} is truncated ({size} of {end} bytes); download the GGUF file again")
    return GGUFFile(path, metadata, tensors)
