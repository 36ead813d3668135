"""Early exit: the target's own first L layers as the drafter (self-speculation, as LayerSkip and
Draft & Verify), read out through the target's final norm and output head, or through a head
trained for layer L (`specplay distill --exit-head`). Weights shared, a KV cache of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specplay.drafters.kind import DrafterKind, absolute, options
from specplay.drafters.model_config import ModelConfig, Role
from specplay.errors import ConfigError

HEAD_MLP_LIMIT = 65536
"""The widest hidden layer a trained exit head may have (`specplay distill --exit-head
layers=L,mlp=N` accepts no more, and a head's file claiming more is refused)."""


class EarlyExitKind(DrafterKind):
    """The target's first `layers` layers (checked against the target when it loads)."""

    name = "early-exit"
    syntax = "early-exit:layers=L[,head=DIR]"
    summary = "the target's first L layers, optionally with a trained head"
    form = "target-layers"
    grows_trees = True

    def parse(self, name: str, role: Role, given: str | None, field: str) -> ModelConfig:
        params = options(given, field, self.name) if given is not None else {}
        if set(params) - {"layers", "head"} or "layers" not in params:
            raise ConfigError(field, "early-exit takes layers=L and optionally head=DIR (e.g. early-exit:layers=8)")
        try:
            layers = int(params["layers"])
        except ValueError:
            layers = 0
        if layers < 1:
            raise ConfigError(
                field, f"early-exit:layers={params['layers']} must be a whole number of layers, 1 or more"
            )
        head = absolute(params["head"]) if "head" in params else None
        return ModelConfig(name, role, self.name, "", {"layers": layers, "head": head})

    def describe(self, model: ModelConfig) -> str:
        head = model.params.get("head")
        layers = model.params["layers"]
        return f"early exit after layer {layers} of the target" + (f", exit head {head}" if head else "")

    def replay(self, name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
        head = record.get("head")
        path = head.get("path") if isinstance(head, Mapping) else head  # the head's identity, or its path
        return ModelConfig(name, role, self.name, "", {"layers": int(record["layers"]), "head": path})

    def check_backend(self, model: ModelConfig, backend: str) -> None:
        if backend != "mlx":
            raise ConfigError("draft", f"{model.name!r} drafts with the target's own layers: it needs --backend mlx")


EARLY_EXIT = EarlyExitKind()
