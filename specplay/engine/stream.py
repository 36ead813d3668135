"""What every consumer of runs talks to: something that turns a request into the event stream.

The speculative engine over a backend (loop.SpecEngine) and a vLLM server that speculates by
itself (backends/vllm/native_stream.py) both implement it; `capabilities` says how they differ,
so the playground, `run`, sessions and exports never ask which one they have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from specplay.engine.capabilities import Capabilities
from specplay.engine.conversation import Exchange
from specplay.engine.events import Event
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.routers.routing import Routing

Clock = Callable[[], float]


class EventStream(Protocol):
    capabilities: Capabilities
    drafters: tuple[str, ...]
    """The routes: drafters, or speculating servers."""
    routing: Routing
    """How `--route auto` picks a route for a prompt, and why; its route map (router class to
    route, as resolved at load) is what sessions record."""

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        """Prompt to token ids: through the chat template when there is one, unless `raw`; after
        the conversation's `earlier` turns, when it has some."""
        ...

    def token_text(self, token_id: int) -> str:
        """One token's text, for views; safe from any thread."""
        ...

    def generate(self, request: Request, controls: LiveControls, clock: Clock | None = None) -> Iterator[Event]:
        """Run `request` (its mode among `capabilities.modes`), reading `controls` as it goes; ends
        with a DoneEvent. `clock` times the events (default: the stream's own)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Backend and model identity for session files; never a secret."""
        ...

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """The target's log-probability, at temperature 1, of each of `token_ids` after the prompt
        (where `capabilities.scoring`)."""
        ...

    def close(self) -> None:
        """Release connections; called on the model thread as it ends."""
        ...
