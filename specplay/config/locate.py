"""Whether a local model is where its spec says, before anything loads: a folder, a GGUF file, or
a Hugging Face id in the local cache (nothing is downloaded at run time)."""

from __future__ import annotations

from pathlib import Path

from specplay.errors import ConfigError


def check_found(field: str, kind: str, location: str) -> None:
    """A ConfigError naming `field` (target, draft) when the model of `kind` (mlx, gguf) at
    `location` cannot be found, saying how to get it."""
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
    return location.count("/") == 1 and not location.startswith((".", "/", "~"))


def _in_hugging_face_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
