"""What an event stream can do. The views read this record instead of asking which backend runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specplay.engine.rules import RULE_NAMES
from specplay.engine.settings import ADAPTIVE_ROUTE, MODES, NONE_ROUTE, Mode, SpecSettings
from specplay.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Capabilities:
    live_controls: bool = True
    """k, policy and TV budget change while a run goes (the route and sampling always may)."""
    fixed_by: str | None = None
    """Why they cannot, in a line, when they cannot."""
    wall_time_is_speed: bool = True
    """False where wall time is mostly HTTP round trips and server recomputes: no speedup is
    measured there, it is modelled from acceptance and the lane's own draft and verify times."""
    modes: tuple[Mode, ...] = MODES
    """What it can run: a speculating server runs speculative only, target-only from a baseline."""
    top_n: bool = False
    """Verification can report each distribution's most likely tokens (the drill-down's candidates)."""
    scoring: bool = False
    """It can score text under the target (fidelity)."""
    lanes_take_turns: bool = True
    """Lanes side by side take turns event by event, each timed by its own turns (their models
    share this machine's time). False: a server streams each lane in its own time, and reading
    one while another waits would time the wait, so lanes run one after the other."""
    local_token_text: bool = True
    """`token_text` answers from a tokenizer on this machine. False: a token not seen before is a
    request to a server, which a view must not wait for."""
    server_judges: bool = False
    """A server speculates and judges by itself: token sources are a guess until the run ends,
    when a RecolourEvent corrects them and the server's own account arrives (a printed transcript
    waits for it; views show that account, as the rounds carry no judged positions)."""

    rules: tuple[str, ...] = RULE_NAMES
    """The acceptance rules it can judge: the relaxed ones beside mentored decoding need full
    distributions to account their TV exactly."""
    counterfactual: bool = False
    """It can judge other drafters' proposals from a lane's context without committing them."""
    round_routes: bool = True
    """It can change drafters between rounds (`--route adaptive`); a speculating server drafts by itself."""
    trees: bool = False
    """It can draft trees and verify one in a pass (`--width`, `--tree`: tree.py)."""

    @property
    def baseline(self) -> bool:
        """A target-only lane can run beside the speculative one."""
        return "target" in self.modes

    def to_record(self) -> dict[str, Any]:
        return asdict(self) | {"modes": list(self.modes), "rules": list(self.rules)}


def check_supported(settings: SpecSettings, capabilities: Capabilities) -> None:
    """A rule or counterfactual routes the stream cannot judge are refused before a round, at a
    command's edge as in a running playground."""
    if settings.rule not in capabilities.rules and capabilities.fixed_by:
        raise ConfigError("rule", f"{settings.rule} cannot run here: {capabilities.fixed_by}")
    if settings.rule not in capabilities.rules:
        raise ConfigError(
            "rule",
            f"{settings.rule} needs full distributions to account its TV, and this backend reports only the "
            f"top-K of each: use {' or '.join(capabilities.rules)}, or the MLX backend",
        )
    if settings.counterfactual and not capabilities.counterfactual:
        raise ConfigError("counterfactual", "routes run on the MLX backend only: turn them off")
    if settings.route == NONE_ROUTE and capabilities.server_judges:
        raise ConfigError("route", f"none (no speculation) cannot run on a speculating server: {capabilities.fixed_by}")
    if settings.width > 1:
        _check_trees(settings, capabilities)
    if settings.route == ADAPTIVE_ROUTE and not capabilities.round_routes:
        raise ConfigError(
            "route", f"adaptive picks a drafter every round, which cannot happen here: {capabilities.fixed_by}"
        )


def no_trees(capabilities: Capabilities) -> str | None:
    """Why draft trees cannot run on a stream, or None where they can."""
    if capabilities.trees:
        return None
    return capabilities.fixed_by or "this backend verifies a chain of drafts only"


def _check_trees(settings: SpecSettings, capabilities: Capabilities) -> None:
    if (why := no_trees(capabilities)) is not None:
        raise ConfigError("width", f"draft trees cannot run here: {why}; use width 1 (a chain), or the MLX backend")
    if settings.counterfactual:
        raise ConfigError(
            "counterfactual", "routes judge other drafters' chains beside a chain: turn them off, or use width 1"
        )
    rule = settings.acceptance_rule
    if not rule.lossless:
        # Siblings are judged by recursive rejection sampling, which no relaxed rule extends.
        knob = rule.knob
        lossless = f"set {knob.label} to {knob.lossless:g}" if knob.lossless is not None else "use the lossless rule"
        raise ConfigError(
            "width",
            f"a tree's siblings are judged losslessly only, and {rule.name} {knob.symbol} {rule.value:g} relaxes "
            f"acceptance: {lossless}, or use width 1 (a chain)",
        )
