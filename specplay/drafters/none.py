"""`none`: no drafter at all. The route every run has besides its drafters, where the target
decodes alone through the same engine and events (what auto and adaptive choose where every
drafter is predicted to lose); never given with --draft."""

from __future__ import annotations

from specplay.drafters.kind import DrafterKind
from specplay.drafters.model_config import ModelConfig, Role
from specplay.engine.settings import NONE_ROUTE
from specplay.errors import ConfigError


class NoDrafterKind(DrafterKind):
    """No drafter: each round is one target step. Never loaded, never recorded as a drafter."""

    name = NONE_ROUTE
    syntax = "--route none"
    summary = "no speculation: the target decodes alone"
    form = "none"
    backends = ("mlx", "vllm")
    cannot_write = "the route is none, which drafts nothing"

    def parse(self, name: str, role: Role, given: str | None, field: str) -> ModelConfig:
        raise ConfigError(field, f"{NONE_ROUTE} is a route, not a drafter: pick it with --route {NONE_ROUTE}")

    def describe(self, model: ModelConfig) -> str:
        return self.summary


NONE = NoDrafterKind()
