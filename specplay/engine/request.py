"""One generation's request: the prompt and what stays fixed for the whole run."""

from __future__ import annotations

from dataclasses import dataclass

from specplay.engine.settings import MODES, Mode
from specplay.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Request:
    """One generation: the prompt and what stays fixed for the whole run."""

    prompt: str
    """The text the router classifies."""
    prompt_token_ids: tuple[int, ...]
    mode: Mode = "speculative"
    seed: int = 0
    max_tokens: int = 256
    ignore_eos: bool = False
    pipeline: bool = True
    """Target/draft-only: compute the next token while this one is handed over. Lanes that take
    turns on one device turn it off, so no lane's work runs on another's time."""
    continues: bool = False
    """A conversation's next turn: `prompt_token_ids` hold the conversation so far, and the
    caches of this mode's last generation are kept for what they share with it. Otherwise the
    generation starts from empty caches (and any kept ones are let go)."""
    inspect: bool = False
    """Speculative: also report each distribution's top TOP_N tokens per position, for drill-down
    views (costs a top-k per round on the device); ignored by backends that cannot."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError("mode", f"must be one of {', '.join(MODES)} (got {self.mode!r})")
        if self.seed < 0:
            raise ConfigError("seed", f"must be 0 or more (got {self.seed})")
        if self.max_tokens < 1:
            raise ConfigError("max_tokens", f"must be at least 1 (got {self.max_tokens})")
        if not self.prompt_token_ids:
            raise ConfigError("prompt", "encodes to no tokens; give a non-empty prompt")
