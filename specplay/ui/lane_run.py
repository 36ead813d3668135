"""One run of the playground's lanes on the model thread: its lanes, its prompt and where the
route sends it, each lane's live controls, which of its lanes a live change reaches, and when the
draft-only lane switched on or off takes effect. No Textual here: this is tested without a
terminal."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from specplay.config.run_config import RequestConfig
from specplay.engine.conversation import Exchange
from specplay.engine.live_controls import LiveControls, SettingsChange
from specplay.engine.routers.routing import RouteChoice, resolve_route
from specplay.engine.settings import ROUTE_SETTINGS, SpecSettings
from specplay.engine.stream import EventStream
from specplay.runner.host import DRAFT_LANE, LANES, ModelHost
from specplay.ui.lane_board import LaneBoard
from specplay.ui.protocols import LaneItem

NEXT_RUN_LANE = "the draft-only lane runs from the next run (ctrl+r): this run began without it"
NEXT_CONVERSATION_LANE = (
    "the draft-only lane runs from the next conversation (ctrl+n): this one began without it, and each lane "
    "answers every turn after its own earlier answers"
)


class LaneRun:
    def __init__(
        self, run_id: int, prompt: str, lanes: tuple[str, ...], settings: SpecSettings, drafters: tuple[str, ...]
    ) -> None:
        """Run `run_id` of `prompt` in `lanes`, starting from `settings` (the target-only lane has
        no drafter to route to)."""
        self.run_id, self.prompt, self.lanes = run_id, prompt, lanes
        self.controls = {lane: LiveControls(settings, drafters if lane != "target" else ()) for lane in lanes}

    def start(
        self,
        host: ModelHost,
        request: RequestConfig,
        board: LaneBoard,
        on_end: Callable[[BaseException | None], None],
        earlier: Mapping[str, Sequence[Exchange]] | None,
    ) -> None:
        """Start the lanes on the host; their events queue on `board`, tagged with this run."""
        run_id = self.run_id
        host.start(
            request,
            self.controls,
            lambda lane, event, busy_s, drafted: board.queue(LaneItem(run_id, lane, event, busy_s, drafted)),
            on_end,
            earlier,
        )

    def stop(self) -> None:
        for controls in self.controls.values():
            controls.request_stop()

    def apply(
        self, change: SettingsChange, setting: str, draft_cannot: str | None, ended: Callable[[str], bool]
    ) -> tuple[list[str], list[str]]:
        """Apply `change` (of `setting`) to the lanes it reaches that still generate; returns them
        and what to tell the user. The speculative lane takes every change; the target-only lane
        only sampling changes, so the two lanes keep sampling the same distribution; the
        draft-only lane takes the route too, so it shows the drafter now serving, unless it cannot
        write with it (`draft_cannot`: why)."""
        notices = []
        lanes = self.lanes if change.sampling_only else ("speculative",)
        if setting == "route" and DRAFT_LANE in self.lanes:
            if draft_cannot:
                notices.append(f"the draft-only lane keeps its drafter: {draft_cannot}")
            else:
                lanes += (DRAFT_LANE,)
        running = [lane for lane in lanes if not ended(lane)]
        if not running:  # the control moved, but no lane it reaches is still generating
            notices.append("the lanes this change goes to have ended: it applies from the next run")
        for lane in running:
            self.controls[lane].apply(change)
        return running, notices


def draft_lane_switched(shown: bool, lanes: Sequence[str], generating: bool, conversing: bool) -> tuple[str, str]:
    """The draft-only lane switched on or off (`shown`) where `lanes` run: what the lane says in
    place of its text, and what the user is told ("": nothing). A run, and a conversation's every
    turn, keeps the lanes it began with."""
    if shown == (DRAFT_LANE in lanes) or not (generating or conversing):
        return "", ""
    if generating:
        return NEXT_RUN_LANE if shown else "", "the draft-only lane changes from the next run"
    return NEXT_CONVERSATION_LANE if shown else "", "the draft-only lane changes from the next conversation (ctrl+n)"


def first_lanes(draft_lane: bool, draft_cannot: str | None, modes: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The lanes of a conversation's first turn, in session order, among the stream's `modes`:
    with the draft-only lane where it is switched on and can write (`draft_cannot`: why not),
    and what to tell the user ("": nothing)."""
    wanted = (*LANES, DRAFT_LANE) if draft_lane and not draft_cannot else LANES
    notice = f"no draft-only lane: {draft_cannot}" if draft_lane and draft_cannot else ""
    return tuple(lane for lane in wanted if lane in modes), notice


def route_choice(stream: EventStream | None, prompt: str, route: str) -> RouteChoice | None:
    """The router's choice for `prompt` where the route setting asks one (auto, adaptive)."""
    return stream.routing.choice(prompt) if route in ROUTE_SETTINGS and stream is not None else None


def routed_drafter(stream: EventStream | None, prompt: str, route: str) -> str:
    """The drafter a route setting picks for `prompt` (adaptive: the one it starts from)."""
    choice = route_choice(stream, prompt, route)
    return route if choice is None else resolve_route(route, choice.drafter)
