"""The lanes of the current (or last) run as the playground holds them: every event per lane (what
its session records), each lane's tally, the earlier turns' tallies of a conversation, and the
queue between the model thread and the screen.

The model thread queues each event (a deque append is thread-safe) and the screen is told once
until it takes the batch: `take_queued` clears that flag before it takes, so an event queued
meanwhile is either taken now or told again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from specplay.engine.events import DoneEvent, Event
from specplay.runner.host import DRAFT_LANE, LANES
from specplay.ui.protocols import LaneItem
from specplay.ui.stats import LaneTally

ALL_LANES = (*LANES, DRAFT_LANE)


class LaneBoard:
    def __init__(self, tell_screen: Callable[[], None]) -> None:
        """`tell_screen`: from the model thread, that events wait to be taken."""
        self.tell_screen = tell_screen
        self.events: dict[str, list[Event]] = {lane: [] for lane in ALL_LANES}
        self.tallies: dict[str, LaneTally] = {lane: LaneTally() for lane in ALL_LANES}
        self.earlier: list[dict[str, LaneTally]] = []
        """The tallies of the conversation's turns before this one, on show with it."""
        self.inbox: deque[LaneItem] = deque()
        """Filled by the model thread, taken by the UI thread in batches."""
        self._signalled = False
        """The screen was told and has not taken the batch yet."""

    def queue(self, item: LaneItem) -> None:
        """Model thread: queue an event, and tell the screen once until it takes the batch."""
        self.inbox.append(item)
        if not self._signalled:
            self._signalled = True
            self.tell_screen()

    def take_queued(self, run_id: int) -> list[LaneItem]:
        """UI thread: every queued item, those of runs before `run_id` dropped."""
        self._signalled = False
        taken = []
        while self.inbox:
            item = self.inbox.popleft()
            if item.run_id == run_id:
                taken.append(item)
        return taken

    def add(self, item: LaneItem) -> None:
        self.events[item.lane].append(item.event)
        self.tallies[item.lane].add(item.event, item.busy_s)

    def clear(self) -> None:
        """A new conversation: no turn on show."""
        self.events = {lane: [] for lane in ALL_LANES}
        self.tallies = {lane: LaneTally() for lane in ALL_LANES}
        self.earlier = []

    def next_turn(self) -> None:
        """The conversation goes on: this turn's tallies join the earlier ones, its events (in its
        session) make way for the next turn's."""
        self.earlier.append(self.tallies)
        self.events = {lane: [] for lane in ALL_LANES}
        self.tallies = {lane: LaneTally() for lane in ALL_LANES}

    def turn_tallies(self, lane: str) -> list[LaneTally]:
        """`lane`'s tally in every turn on show, this one last."""
        return [*(turn[lane] for turn in self.earlier), self.tallies[lane]]

    def ended(self, lane: str) -> bool:
        """Whether `lane`'s last event taken is its end (a later change cannot reach it)."""
        events = self.events.get(lane)
        return bool(events) and isinstance(events[-1], DoneEvent)
