"""A drafter that is another model: an mlx-lm folder or cached Hugging Face id, a GGUF file, a
model `specplay fetch` downloaded (by name), or, on vLLM, a server. The target is written alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specplay.catalog.models import CATALOG, cached_path
from specplay.drafters.kind import DrafterKind, absolute
from specplay.drafters.model_config import SERVER, ModelConfig, Role
from specplay.errors import ConfigError


class ModelKind(DrafterKind):
    """A separate model sharing the target's token mapping, with weights and a cache of its own."""

    name = "model"
    syntax = "FOLDER | HF_ID | FILE.gguf | FETCHED_NAME"
    summary = "another model (a small one of the target's family)"
    form = "model"
    grows_trees = True
    backends = ("mlx", "vllm")
    record_kinds = ("gguf",)
    """A model converted from a GGUF file records its kind as gguf."""

    def parse(self, name: str, role: Role, given: str | None, field: str) -> ModelConfig:
        written = given or ""
        if written.lower().endswith(".gguf"):
            return ModelConfig(name, role, "gguf", absolute(written))
        if written in CATALOG and not Path(written).exists():
            model = CATALOG[written]
            path = cached_path(model)
            if not path.is_file():
                raise ConfigError(
                    field,
                    f"{written} is not downloaded yet: `specplay fetch {written}` gets it ({model.size / 1e6:.0f} MB)",
                )
            return ModelConfig(name, role, "gguf", str(path))
        local = Path(written).expanduser()
        # else a Hugging Face id
        return ModelConfig(name, role, "mlx", absolute(written) if local.exists() else written)

    def describe(self, model: ModelConfig) -> str:
        return model.location

    def record(self, model: ModelConfig) -> dict[str, Any]:
        return {"kind": self.name, "source": model.location}

    def replay(self, name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
        if record.get("kind") == "gguf":
            return ModelConfig(name, role, "gguf", record["source"])
        return ModelConfig(name, role, "mlx", record["path"])

    def matches(self, model: ModelConfig, record: Mapping[str, Any]) -> bool:
        return model.location in (record.get("source"), record.get("path"))

    def check_backend(self, model: ModelConfig, backend: str) -> None:
        if backend == "mlx" and model.kind == SERVER:
            raise ConfigError("backend", "is mlx, which takes --target and --draft; add --backend vllm for URLs")


MODEL = ModelKind()


def check_found(field: str, kind: str, location: str) -> None:
    """A ConfigError naming `field` (target, draft) when the model of `kind` (mlx, gguf) at
    `location` cannot be found, saying how to get it (nothing is downloaded at run time)."""
    path = Path(location).expanduser()
    if kind == "gguf":
        if not path.is_file():
            raise ConfigError(field, f"{location!r} is not a file: give the path of a GGUF file")
        return
    if path.exists():
        return
    if not _looks_like_hub_id(location):
        raise ConfigError(
            field,
            f"{location!r} is no folder here: give an mlx-lm folder, a GGUF file or a fetched name "
            "(`specplay fetch` lists them)",
        )
    if not _in_hugging_face_cache(location):
        raise ConfigError(
            field,
            f"{location!r} is no folder here and not in the Hugging Face cache: download it first "
            f"(`hf download {location}`) or give a local folder",
        )


def _looks_like_hub_id(location: str) -> bool:
    if location.count("/") != 1 or location.startswith((".", "/", "~")):
        return False
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:  # "my models/target" or a session's "<DEMO_DIR>/target" is a missing folder, never a hub name
        validate_repo_id(location)
    except HFValidationError:
        return False
    return True


def _in_hugging_face_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
