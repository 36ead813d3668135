"""What a drafter is made of, as typed specs: another model, the context itself, or the target's first layers.

`load_mlx_backend` takes each drafter as (name, spec); a plain string is a `ModelDrafter`. Every
kind routes, drafts, verifies and commits through the same `Generation` calls, so the router and
the live controls treat them alike. `drafter_record` is what sessions keep of a spec, and
`drafter_from_record` reads it back for a replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specplay.backends.prompt_lookup import NGRAM_LIMIT
from specplay.errors import ConfigError, SpecplayError

MODEL = "model"
PROMPT_LOOKUP = "prompt-lookup"
EARLY_EXIT = "early-exit"
KINDS = (MODEL, PROMPT_LOOKUP, EARLY_EXIT)


@dataclass(frozen=True, slots=True)
class ModelDrafter:
    """A separate mlx-lm model sharing the target's token mapping."""

    path: str
    """A folder or a Hugging Face id already in the local cache."""


@dataclass(frozen=True, slots=True)
class PromptLookup:
    """Proposes the tokens that followed the latest earlier occurrence of the context's last n tokens,
    n from n_max down to n_min; drafts nothing when none occurred. No weights, nothing to load."""

    n_min: int = 2
    n_max: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.n_min <= self.n_max <= NGRAM_LIMIT:
            raise ConfigError(
                "draft",
                f"prompt lookup's n-gram range {self.n_min}..{self.n_max} is invalid: "
                f"it needs 1 <= n_min <= n_max <= {NGRAM_LIMIT}",
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


def kind_of(spec: DrafterSpec) -> str:
    if isinstance(spec, PromptLookup):
        return PROMPT_LOOKUP
    if isinstance(spec, EarlyExit):
        return EARLY_EXIT
    return MODEL


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


def drafter_from_record(record: Mapping[str, Any]) -> DrafterSpec:
    """The spec a session recorded (its drafter's entry in `describe()["models"]`). Records from
    before drafter kinds existed are models, named by their folder."""
    kind = record.get("kind", MODEL)
    try:
        if kind == PROMPT_LOOKUP:
            return PromptLookup(int(record["n_min"]), int(record["n_max"]))
        if kind == EARLY_EXIT:
            head = record.get("head")
            path = head.get("path") if isinstance(head, Mapping) else head
            return EarlyExit(int(record["layers"]), Path(path) if path else None)
        if kind == MODEL:
            return ModelDrafter(str(record["path"]))
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecplayError(f"a {kind} drafter's record is incomplete ({exc}); give the drafter again") from None
    raise SpecplayError(f"unknown drafter kind {kind!r} (known: {', '.join(KINDS)}); a newer specplay wrote it")
