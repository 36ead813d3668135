"""What "Measure round costs" times in the playground, and what the status line says of it: a
round's parts at the length the next turn would have, so that the k they advise is that turn's.
In a conversation the next turn's speculative lane encodes its earlier exchanges (its own answers)
and then the prompt, as each lane does (engine/conversation.py); its verify pass costs that
context's. No Textual here: this is tested without a terminal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from specplay.config.run_config import RequestConfig
from specplay.engine.conversation import Exchange
from specplay.engine.costs import RoundCosts
from specplay.engine.settings import SpecSettings
from specplay.engine.stream import EventStream
from specplay.runner.host import ModelHost
from specplay.ui.lane_run import routed_drafter
from specplay.ui.stats import verify_steps
from specplay.ui.turns import Conversation

OnCosts = Callable[[RoundCosts | None, BaseException | None], None]


@dataclass(frozen=True)
class CostsAsk:
    request: RequestConfig
    """The prompt on screen, as the next run asks it."""
    settings: SpecSettings
    """The controls' settings: their sampling and rule are timed, their k drafted."""
    earlier: tuple[Exchange, ...]
    """The speculative lane's earlier exchanges, where the prompt is the conversation's next turn."""
    rows: int
    """The verify pass is timed over 1..rows rows: the most the controls' k may draft, and one more."""
    route: str
    """The drafter whose rounds are measured too: the one the route picks for the prompt."""

    def words(self) -> str:
        """The status line while it measures."""
        after = f" after the conversation's {len(self.earlier)} earlier turns" if len(self.earlier) > 1 else ""
        after = " after the conversation's earlier turn" if len(self.earlier) == 1 else after
        return f"measuring round costs{after}: the verify pass over 1..{self.rows} rows, a target step, the drafters…"

    def start(self, host: ModelHost, done: OnCosts) -> None:
        """Measure on the host's model thread; `done` is called there with the costs or the error."""
        host.measure_costs(self.request, self.settings, self.rows, self.route, done, earlier=self.earlier)


def costs_ask(
    request: RequestConfig, settings: SpecSettings, stream: EventStream | None, conversation: Conversation, prompt: str
) -> CostsAsk:
    """What to measure for `prompt` under `settings`: after the conversation's earlier turns where
    `prompt` follows them up (`Conversation.follows_up`), else alone, as a new conversation's first."""
    earlier = conversation.earlier().get("speculative", ()) if conversation.follows_up(prompt) else ()
    rows = max(settings.policy_params.k_max, settings.k) + 1
    route = routed_drafter(stream, prompt, settings.route)
    return CostsAsk(replace(request, prompt=prompt), settings, tuple(earlier), rows, route)


def measured_words(costs: RoundCosts) -> str:
    """The status line once measured: at how many tokens, and the verify pass in target steps."""
    at = f" at {costs.context_tokens} tokens" if costs.context_tokens is not None else ""
    return f"round costs measured{at} ({verify_steps(costs)}); a run's stats now say which k would pay"
