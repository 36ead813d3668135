"""The playground's conversation: its turns on the lane board, on the screen and in its session,
each lane's own answers, which the next turn continues, and whether a prompt follows up. No
Textual here: this is tested without a terminal.

Each lane continues its own conversation (engine/conversation.py): its next turn is encoded after
its own earlier answers, which under sampling or a relaxed rule differ from the other lanes'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specplay.engine.conversation import Exchange
from specplay.engine.events import DoneEvent, Event
from specplay.engine.routers.routing import RouteChoice
from specplay.errors import error_line
from specplay.runner.host import DRAFT_LANE
from specplay.runner.recording import RunRecorder
from specplay.store import Session
from specplay.ui.lane_board import LaneBoard
from specplay.ui.opened import opened_items
from specplay.ui.protocols import LaneItem, View


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn run: the user's prompt and each lane's answer (its DoneEvent's text)."""

    prompt: str
    answers: Mapping[str, str]


class Conversation:
    """The conversation on show, which the next run may continue (no turns: the next run starts
    one). `view` gives the screen, once it is up."""

    def __init__(self, board: LaneBoard, view: Callable[[], View]) -> None:
        self.board, self._view = board, view
        self.turns: list[Turn] = []
        self.lanes: tuple[str, ...] = ()
        """The lanes its first turn ran: every later turn runs these (a lane's conversation cannot
        begin halfway, and its session names its lanes once)."""
        self.recorder: RunRecorder | None = None
        """Its session, written as its events are shown; None: not saved, or a saved one on show."""
        self.queued: list[str] = []
        """A saved conversation's later prompts, run in turn as its re-run goes."""

    def __len__(self) -> int:
        return len(self.turns)

    def follows_up(self, prompt: str) -> bool:
        """Whether `prompt` is the conversation's next turn: always, once it has one, except the
        first turn's own prompt right after it, which runs again from the start (one prompt
        compared under other settings, as before conversations)."""
        if not self.turns:
            return False
        return len(self.turns) > 1 or prompt != self.turns[0].prompt

    def earlier(self) -> dict[str, tuple[Exchange, ...]]:
        """Each lane's earlier exchanges: the prompts, and that lane's own answers."""
        return {lane: tuple(Exchange(t.prompt, t.answers[lane]) for t in self.turns) for lane in self.lanes}

    def refusal(self, draft_cannot: Callable[[], str | None]) -> str | None:
        """Why the conversation cannot take its next turn (None: it can): its draft-only lane
        cannot write on the drafter the route picks now (`draft_cannot` says why, or None)."""
        if DRAFT_LANE not in self.lanes or (why := draft_cannot()) is None:
            return None
        return f"the draft-only lane cannot answer this turn: {why}; route to a drafter, or ctrl+n starts over"

    def turn_words(self) -> str:
        """The turn a run now is, for the status line: "" for a first turn alone, " turn 2", or
        " turn 1 of 3" in a saved conversation's re-run."""
        turn = len(self.turns) + 1
        of = f" of {turn + len(self.queued)}" if self.queued else ""
        return f" turn {turn}{of}" if turn > 1 or of else ""

    def ended_words(self, turn: str, error: BaseException | None, finish: str, route: str, saved: str) -> str:
        """The status line once turn `turn` (its `turn_words`) ended: failed with `error`, else
        finished (`finish`) on `route`; `saved`: where its session is (RunRecorder.finish)."""
        if error is not None:
            over = "; the next run starts a new conversation" if turn else ""
            return f"run failed: {error_line(error)}{saved}{over}"
        # ctrl+n, a new conversation, is in the footer: the line has room for little more
        then = "type a follow-up, or ctrl+n starts over" if turn else "ctrl+r runs again, a new prompt follows up"
        return f"finished ({finish}){turn} · {route}{saved}; {then}"

    # --- turns on show -----------------------------------------------------------------------

    def begin(self, lanes: tuple[str, ...], recorder: RunRecorder | None, queued: Sequence[str] = ()) -> None:
        """A new conversation of `lanes`, saved by `recorder`, on cleared lanes; `queued`: the
        prompts of its later turns, where it re-runs a saved one."""
        self.forget()
        self.lanes, self.recorder, self.queued = lanes, recorder, list(queued)

    def next_turn(self, prompt: str, route_choice: RouteChoice | None = None) -> None:
        """The lanes go on below the turns before, each marked where the turn begins, and so does
        the session, with where the route setting sent `prompt` and why (`route_choice`), if it chose."""
        self.board.next_turn()
        self._view().start_turn(len(self.turns), prompt)
        if self.recorder is not None:
            self.recorder.start_turn(prompt, route_choice)

    def take(self, item: LaneItem, save: bool = True) -> None:
        self.board.add(item)
        if save and self.recorder is not None:
            self.recorder.record(item.lane, item.event)
        self._view().add_event(item.lane, item.event, item.drafted_text)

    def drain(self, run_id: int) -> bool:
        """Take every queued item of run `run_id` into the lanes; whether there was any."""
        taken = self.board.take_queued(run_id)
        for item in taken:
            self.take(item)
        if taken and self.recorder is not None:
            self.recorder.flush()
        return bool(taken)

    def end_turn(self, prompt: str, error: BaseException | None) -> tuple[Path | None, str, bool]:
        """A run ended (`error`: how it failed): its session finished (RunRecorder.finish says
        what the status line says), and each lane's answer kept; a failed turn ends the
        conversation."""
        saved = self.recorder.finish(error) if self.recorder is not None else (None, "", False)
        if error is not None or not self.add(prompt, self.lanes, self.board.events):
            self.turns.clear()
            self.queued.clear()
        return saved

    def add(self, prompt: str, lanes: Sequence[str], events: Mapping[str, Sequence[Event]]) -> bool:
        """A turn ended: keep each lane's answer. False, and nothing kept, where a lane has no end
        to answer with (it failed)."""
        answers = {}
        for lane in lanes:
            done = events[lane][-1] if events.get(lane) else None
            if not isinstance(done, DoneEvent):
                return False
            answers[lane] = done.text
        self.lanes = tuple(lanes)
        self.turns.append(Turn(prompt, answers))
        return True

    def show_saved(self, session: Session, lanes: tuple[str, ...], run_id: int, decode: Callable[[int], str]) -> None:
        """A saved session's every turn in `lanes`, read-only, each below the one before, on
        lanes the conversation left (`forget`): not continued, its caches are gone."""
        for turn in session.turns:
            if turn.index:
                self.board.next_turn()
                self._view().start_turn(turn.index, turn.prompt)
            for item in opened_items(turn.lanes, lanes, run_id, decode):
                self.take(item, save=False)

    def forget(self) -> None:
        """No turn on show, none to continue, no session being written (the last one is
        finished)."""
        self.turns.clear()
        self.queued = []
        self.lanes, self.recorder = (), None
        self.board.clear()
        self._view().clear_lanes()

    def close(self, run_id: int) -> None:
        """The app quits: events no frame took yet (up to a second's on a busy machine) are saved
        too, and the session stops there (incomplete mid-run; a finished turn's stays complete)."""
        try:
            for item in self.board.take_queued(run_id):
                if self.recorder is not None:
                    self.recorder.record(item.lane, item.event)
        finally:
            if self.recorder is not None:
                self.recorder.close()
