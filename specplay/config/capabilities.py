"""What each backend can do, known before it loads: the checks at a command's edge read the same
records the running sources report, so a run is refused in one line before any model work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specplay.engine.capabilities import Capabilities
from specplay.engine.rules import RULES

if TYPE_CHECKING:
    from specplay.config.run_config import RunConfig

NATIVE_FIXED = "k, drafter and acceptance rule are fixed by the server's --speculative-config (a restart changes them)"

MLX = Capabilities(top_n=True, scoring=True, counterfactual=True, trees=True)

TOP_K_RULES = tuple(name for name, rule in RULES.items() if not rule.full_distributions)
"""The rules a backend that knows only each distribution's top-K can judge: a bracket of d is enough."""

VLLM_INSPECTION = Capabilities(wall_time_is_speed=False, scoring=True, local_token_text=False, rules=TOP_K_RULES)
"""Wall time is mostly HTTP round trips and server recomputes, not speculative speed; top-K
logprobs account the TV of a rule judged from d, and no other rule's."""


def vllm_native(baseline: bool) -> Capabilities:
    """Speculating servers: they fix k, the rule and their drafter, stream each lane in its own
    time, and report their own account at the end; target-only runs on a baseline server."""
    return Capabilities(
        live_controls=False,
        fixed_by=NATIVE_FIXED,
        modes=("speculative", "target") if baseline else ("speculative",),
        lanes_take_turns=False,
        local_token_text=False,
        server_judges=True,
        rules=TOP_K_RULES,
        round_routes=False,
    )


def capabilities_of(config: RunConfig) -> Capabilities:
    if config.backend == "mlx":
        return MLX
    return vllm_native(config.vllm.baseline_url is not None) if config.vllm.native else VLLM_INSPECTION
