"""Model specs as users write them: `--target MODEL`, `--draft [NAME=]MODEL`.

A MODEL is an mlx-lm folder or a cached Hugging Face id, a GGUF file (`*.gguf`), the name of a
model `specplay fetch` downloaded (e.g. `smollm2`), or a drafter made from the target or from no
model:

    prompt-lookup[:n=MIN-MAX]            proposes what followed the last match of the last n tokens
    early-exit:layers=L[,head=DIR]       the target's first L layers, optionally with a trained head

A folder that happens to be named like a built-in drafter is written with a path: ./prompt-lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specplay.catalog.models import CATALOG, cached_path
from specplay.config.run_config import ModelKind, ModelSpec, Role
from specplay.errors import ConfigError

MODEL = "model"
"""A drafter that is another model: its kind in a session's record (the run configuration says mlx or gguf)."""
PROMPT_LOOKUP = "prompt-lookup"
EARLY_EXIT = "early-exit"
BUILT_IN: tuple[ModelKind, ...] = (PROMPT_LOOKUP, EARLY_EXIT)
LOOKUP_N = (2, 4)
"""Default n range of prompt lookup: matches of 4 tokens down to 2 (on the demo models it drafted
more usefully than vLLM's 5..5 and gained more than 1..3)."""
LOOKUP_N_MAX = 16
"""The longest n-gram looked up: beyond it a match is no likelier to continue, and the index grows."""


def model_spec(name: str, role: Role, source: str, field: str) -> ModelSpec:
    """The spec of one `--target` / `--draft` value; `field` names the flag for errors."""
    kind_name, sep, arguments = source.partition(":")
    if kind_name in BUILT_IN:
        if role == "target":
            raise ConfigError(field, f"{kind_name} is a drafter, not a target; give the target as a folder or file")
        params = _params(arguments, field, kind_name) if sep else {}
        if kind_name == PROMPT_LOOKUP:
            return ModelSpec(name, role, PROMPT_LOOKUP, "", _lookup_params(params, field))
        return ModelSpec(name, role, EARLY_EXIT, "", _early_exit_params(params, field))
    if source.lower().endswith(".gguf"):
        return ModelSpec(name, role, "gguf", _absolute(source))
    if source in CATALOG and not Path(source).exists():
        model = CATALOG[source]
        path = cached_path(model)
        if not path.is_file():
            raise ConfigError(
                field, f"{source} is not downloaded yet: `specplay fetch {source}` gets it ({model.size / 1e6:.0f} MB)"
            )
        return ModelSpec(name, role, "gguf", str(path))
    local = Path(source).expanduser()
    return ModelSpec(name, role, "mlx", _absolute(source) if local.exists() else source)  # else a Hugging Face id


def _absolute(path: str) -> str:
    """Sessions record model paths: absolute, so a replay from another folder finds them."""
    return str(Path(path).expanduser().absolute())


def _params(text: str, field: str, kind: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(field, f"{kind} takes KEY=VALUE options separated by commas (got {text!r})")
        out[key.strip()] = value.strip()
    return out


def _lookup_params(params: Mapping[str, str], field: str) -> dict[str, Any]:
    unknown = set(params) - {"n"}
    if unknown:
        raise ConfigError(field, f"prompt-lookup takes n=MIN-MAX, not {', '.join(sorted(unknown))}")
    if "n" not in params:
        return {"n_min": LOOKUP_N[0], "n_max": LOOKUP_N[1]}
    low, sep, high = params["n"].partition("-")
    try:
        n_min, n_max = int(low), int(high if sep else low)
    except ValueError:
        n_min = n_max = 0
    if not 1 <= n_min <= n_max <= LOOKUP_N_MAX:
        raise ConfigError(
            field, f"prompt-lookup:n={params['n']} needs n=MIN-MAX with 1 <= MIN <= MAX <= {LOOKUP_N_MAX}"
        )
    return {"n_min": n_min, "n_max": n_max}


def _early_exit_params(params: Mapping[str, str], field: str) -> dict[str, Any]:
    unknown = set(params) - {"layers", "head"}
    if unknown or "layers" not in params:
        raise ConfigError(field, "early-exit takes layers=L and optionally head=DIR (e.g. early-exit:layers=8)")
    try:
        layers = int(params["layers"])
    except ValueError:
        layers = 0
    if layers < 1:
        raise ConfigError(field, f"early-exit:layers={params['layers']} must be a whole number of layers, 1 or more")
    head = _absolute(params["head"]) if "head" in params else None
    return {"layers": layers, "head": head}
