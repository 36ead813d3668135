"""What a drafter is made of, as typed specs: another model, the context itself, or the target's first layers.

`load_mlx_backend` takes each drafter as (name, spec); a plain string is a `ModelDrafter`. Every
kind routes, drafts, verifies and commits through the same `Generation` calls, so the router and
the live controls treat them alike. `drafter_record` is what sessions keep of a spec (a replay
reads it back as the run configuration's model, in the store's replay module).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specplay.config.models import EARLY_EXIT, LOOKUP_N, LOOKUP_N_MAX, MODEL, PROMPT_LOOKUP
from specplay.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelDrafter:
    """A separate mlx-lm model sharing the target's token mapping."""

    path: str
    """A folder or a Hugging Face id already in the local cache."""


@dataclass(frozen=True, slots=True)
class PromptLookup:
    """Proposes the tokens that followed the latest earlier occurrence of the context's last n tokens,
    n from n_max down to n_min; drafts nothing when none occurred. No weights, nothing to load."""

    n_min: int = LOOKUP_N[0]
    n_max: int = LOOKUP_N[1]

    def __post_init__(self) -> None:
        if not 1 <= self.n_min <= self.n_max <= LOOKUP_N_MAX:
            raise ConfigError(
                "draft",
                f"prompt lookup's n-gram range {self.n_min}..{self.n_max} is invalid: "
                f"it needs 1 <= n_min <= n_max <= {LOOKUP_N_MAX}",
            )


@dataclass(frozen=True, slots=True)
class EarlyExit:
    """The target's first `layers` layers read out through its own final norm and output head
    (self-speculation, as LayerSkip and Draft & Verify): weights shared, its own KV cache."""

    layers: int
    """Layers kept, 1 to the target's layers - 1 (checked against the target when it loads)."""
    head: Path | None = None
    """A trained exit head's folder (`specplay.train.exit_head`), applied to layer `layers`'s output."""

    def __post_init__(self) -> None:
        if not isinstance(self.layers, int) or isinstance(self.layers, bool) or self.layers < 1:
            raise ConfigError(
                "draft", f"early exit's layers must be a whole number of at least 1 (got {self.layers!r})"
            )


DrafterSpec = ModelDrafter | PromptLookup | EarlyExit


def as_spec(value: DrafterSpec | str | Path) -> DrafterSpec:
    """A spec; a folder or Hugging Face id (the older form) becomes a `ModelDrafter`."""
    if isinstance(value, ModelDrafter | PromptLookup | EarlyExit):
        return value
    if isinstance(value, str | Path):
        return ModelDrafter(str(value))
    raise TypeError(f"a drafter is a folder, a Hugging Face id or a drafter spec, not {type(value).__name__}")


def describe_spec(spec: DrafterSpec) -> str:
    """One line for views and exports."""
    if isinstance(spec, PromptLookup):
        return f"prompt lookup, n {spec.n_min}..{spec.n_max}"
    if isinstance(spec, EarlyExit):
        head = f", exit head {spec.head}" if spec.head else ""
        return f"early exit after layer {spec.layers} of the target{head}"
    return spec.path


def drafter_record(spec: DrafterSpec) -> dict[str, Any]:
    """The spec's kind and parameters, as JSON values."""
    if isinstance(spec, PromptLookup):
        return {"kind": PROMPT_LOOKUP, "n_min": spec.n_min, "n_max": spec.n_max}
    if isinstance(spec, EarlyExit):
        return {"kind": EARLY_EXIT, "layers": spec.layers, "head": str(spec.head) if spec.head else None}
    return {"kind": MODEL, "path": spec.path}
