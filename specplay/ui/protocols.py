"""What the playground's controller and its screen promise each other: the state of a run, the
calls the controller makes on the screen (`View`), the messages it sends the UI thread (`Outbox`)
and what the screen may read of a run (`RunReadout`). No Textual here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from specplay.engine.capabilities import Capabilities
from specplay.engine.costs import RoundCosts
from specplay.engine.events import Event
from specplay.engine.settings import SpecSettings
from specplay.engine.stream import EventStream
from specplay.ui.stats import LaneTally


class RunState(Enum):
    UNLOADED = "not connected"
    """Nothing loaded or contacted yet: the first run loads the models (a session opened from vLLM
    servers reaches none of them until the user asks it to re-run)."""
    LOADING = "loading"
    FAILED = "failed"
    """The models did not load: nothing runs; the status line says why."""
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stopping"
    """Stop was asked: the lanes end at their next round."""
    MEASURING = "measuring round costs"
    """The models time a round's parts (engine/costs.py): no run until they are done."""

    @property
    def generating(self) -> bool:
        return self in (RunState.RUNNING, RunState.STOPPING)


@dataclass(frozen=True, slots=True)
class LaneItem:
    """One engine event of one lane, with that lane's own time so far (seconds of its turns) and, for
    a round, the text of each drafted token."""

    run_id: int
    lane: str
    event: Event
    busy_s: float
    drafted_text: tuple[str, ...]


class View(Protocol):
    """What the controller asks of the screen."""

    def show_status(self, text: str, error: bool = False) -> None: ...

    def notify_user(self, text: str, error: bool = False) -> None: ...

    def show_loaded(self, drafters: tuple[str, ...], capabilities: Capabilities) -> None:
        """The routes to offer, and which controls are live."""
        ...

    def show_load_failed(self) -> None:
        """Loading ended in an error (the status line holds it)."""
        ...

    def show_settings(self, settings: SpecSettings, seed: int) -> None:
        """Set the controls (a reopened session's settings)."""
        ...

    def show_prompt(self, text: str) -> None: ...

    def current_prompt(self) -> str: ...

    def offer_follow_up(self) -> None:
        """A turn ended: what is typed in the prompt box next replaces the prompt (a follow-up),
        and the prompt left as it is runs again."""
        ...

    def show_draft_lane(self, shown: bool, note: str = "") -> None:
        """Show or hide the draft-only lane; `note` stands in its text until a run fills it."""
        ...

    def clear_lanes(self) -> None: ...

    def start_turn(self, index: int, prompt: str) -> None:
        """A conversation's turn `index` (from 0) begins after the lanes' texts so far: mark where,
        with the user's prompt, in every lane of the run (and on the draft tape)."""
        ...

    def add_event(self, lane: str, event: Event, drafted_text: tuple[str, ...]) -> None:
        """Take an event into its lane (and the draft tape); shown at the next redraw."""
        ...

    def redraw(self, full: bool) -> None:
        """Show what was added; `full`: the whole texts, to scroll back and pick tokens."""
        ...

    def when_drawn(self, then: Callable[[], None]) -> None:
        """Call `then` after the screen's next refresh (usually after it has drawn what it was
        asked to so far)."""
        ...


class Outbox(Protocol):
    """What the controller tells the UI thread; callable from any thread."""

    def models_loaded(
        self, stream: EventStream | None, identity: dict[str, Any], error: BaseException | None, autorun: bool
    ) -> None:
        """Loading ended; to be handed to `PlaygroundController.loaded` on the UI thread."""
        ...

    def run_ended(self, run_id: int, error: BaseException | None) -> None:
        """Every lane of a run ended; to be handed to `PlaygroundController.ended`."""
        ...

    def lane_events_arrived(self) -> None:
        """Lane events wait in the inbox for a frame."""
        ...

    def models_waiting(self) -> None:
        """The models wait at an event boundary for the frame asked for (runner/gate.py)."""
        ...

    def token_texts_arrived(self) -> None:
        """Token texts a server was asked for have arrived."""
        ...

    def costs_measured(self, costs: RoundCosts | None, error: BaseException | None) -> None:
        """A measurement of round costs ended; to be handed to `PlaygroundController.costs_measured`."""
        ...


class RunReadout(Protocol):
    """What the screen reads of the playground, and the frame commands it sends."""

    @property
    def state(self) -> RunState: ...

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lanes of the current (or last, or opened) run."""
        ...

    @property
    def tallies(self) -> Mapping[str, LaneTally]:
        """Each lane's tally in the turn on show (the only one, for a single prompt)."""
        ...

    def turn_tallies(self, lane: str) -> list[LaneTally]:
        """`lane`'s tally in every turn of the conversation on show, the last turn's last."""
        ...

    @property
    def shown_capabilities(self) -> Capabilities:
        """The loaded stream's, or, while a saved session is on show, those of the stream it ran on."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def settings(self) -> SpecSettings: ...

    @property
    def seed(self) -> int: ...

    @property
    def draft_lane(self) -> bool: ...

    @property
    def costs(self) -> RoundCosts | None:
        """What a round's parts cost here, once measured ("Measure round costs")."""
        ...

    def decode(self, token_id: int) -> str:
        """A token's text for the views (`<id>` while a server's is on its way)."""
        ...

    def drain(self) -> bool:
        """Take the queued lane events into the view; whether there were any."""
        ...

    def draw_between_turns(self) -> bool:
        """Ask the models to wait at their next event boundary (a ModelsWaiting message follows,
        ui/messages.py); False where lanes do not take turns: draw now."""
        ...

    def release_models(self) -> None:
        """The frame is drawn: the models go on."""
        ...
