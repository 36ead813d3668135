"""What the model thread tells the app. Posted from that thread: Textual's post_message is thread-safe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from specplay.engine.events import Event


class ModelsLoaded(Message):
    def __init__(self, drafters: tuple[str, ...], identity: dict[str, Any]) -> None:
        super().__init__()
        self.drafters = drafters
        self.identity = identity


class ModelsFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


@dataclass(frozen=True, slots=True)
class LaneItem:
    """One engine event of one lane, with that lane's own time so far (seconds of its turns) and, for
    a round, the text of each drafted token."""

    run_id: int
    lane: str
    event: Event
    busy_s: float
    drafted_text: tuple[str, ...]


class RunEnded(Message):
    """Both lanes are done (or the run failed before or while generating: `error` says why)."""

    def __init__(self, run_id: int, error: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.error = error
