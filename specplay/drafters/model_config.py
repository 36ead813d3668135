"""One model of a run as the configuration holds it: the target, or a drafter of some kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["target", "drafter"]
LOCAL_FORMATS = ("mlx", "gguf")
"""Models with weights that this machine loads: an mlx-lm folder or Hugging Face id, a GGUF file."""
SERVER = "server"
"""A model behind a vLLM server's address."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One model of a run."""

    name: str
    """"target", or the drafter's name (in vLLM's native mode, a speculating server's route name)."""
    role: Role
    kind: str
    """Where a model's weights are: `mlx` (a folder or a cached Hugging Face id), `gguf` (a file
    converted once), `server` (a vLLM server's address); or, for a drafter made from no model or
    from the target, the name of its kind in the registry (specplay.drafters: `prompt-lookup`,
    `early-exit`)."""
    location: str
    """A folder or Hugging Face id (mlx), a file (gguf), a server's root address (server); empty
    for the drafters made from no model or from the target."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """What a kind needs beyond its location (prompt lookup's n range, early exit's layers and
    head); in native mode the target server's route name."""

    @property
    def local(self) -> bool:
        """Weights this machine loads."""
        return self.kind in LOCAL_FORMATS

    @property
    def on_server(self) -> bool:
        return self.kind == SERVER
