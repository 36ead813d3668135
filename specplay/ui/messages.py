"""What the model thread tells the playground, as Textual messages (post_message is thread-safe).

The controller posts them to the screen; the frame messages are the screen's, the others bubble
up to the app, which hands them to the controller on the UI thread.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from specplay.engine.costs import RoundCosts
from specplay.engine.stream import EventStream


class ModelsLoaded(Message):
    """Loading ended: the stream and its description, or the error that stopped it."""

    def __init__(
        self, stream: EventStream | None, identity: dict[str, Any], error: BaseException | None, autorun: bool
    ) -> None:
        super().__init__()
        self.stream, self.identity, self.error, self.autorun = stream, identity, error, autorun


class RunEnded(Message):
    """Every lane of run `run_id` ended (`error`: why one failed)."""

    def __init__(self, run_id: int, error: BaseException | None) -> None:
        super().__init__()
        self.run_id, self.error = run_id, error


class LaneEventsArrived(Message):
    """Lane events wait in the controller's inbox. Posted once until the screen takes them, and
    coalesced in the queue: however many rounds the models make, a frame takes them in one batch."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LaneEventsArrived)


class ModelsWaiting(Message):
    """The models wait at an event boundary for the frame the screen asked for (runner/gate.py)."""


class TokenTextsArrived(Message):
    """Token texts a server was asked for have arrived: the drill-down can show them."""


class CostsMeasured(Message):
    """A measurement of round costs ended: the costs, or the error that stopped it."""

    def __init__(self, costs: RoundCosts | None, error: BaseException | None) -> None:
        super().__init__()
        self.costs, self.error = costs, error
