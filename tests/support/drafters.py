"""Drafter specs as a user would write them, for tests that load backends directly."""

from __future__ import annotations

from pathlib import Path

from specplay.drafters import ModelConfig, parse_model


def lookup(n_min: int = 2, n_max: int = 4, name: str = "lookup") -> ModelConfig:
    return parse_model(name, "drafter", f"prompt-lookup:n={n_min}-{n_max}", "draft")


def early_exit(layers: int, head: Path | None = None, name: str = "exit") -> ModelConfig:
    options = f"layers={layers}" + (f",head={head}" if head is not None else "")
    return parse_model(name, "drafter", f"early-exit:{options}", "draft")
