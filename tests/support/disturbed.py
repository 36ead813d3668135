"""`run --compare`'s two lanes on the scripted engine, as a quiet machine or a busy one times them:
what the tests of a disturbed speedup read (engine/disturbance.py), in `run`, `sessions`, the
review pages and the playground."""

from __future__ import annotations

from specplay.engine.events import Event
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.store import LaneRecord
from tests.support.costs_clock import LoadedClock
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend

TOKENS = 60
LANE_S = TOKENS * 0.011
"""A lane's simulated time: a step of the scripted target costs 10 ms and 1 ms a row."""
BUSY_TARGET = (1.5 * LANE_S, 100.0)
"""Three times slower from the middle of the target-only lane on (it runs second): its steps drift."""
QUIET = (0.0, 0.0)


def measured_lanes(
    slow_from_s: float = 0.0, slow_until_s: float = 0.0, route: str = "none", prompt: str = CODE_PROMPT
) -> tuple[LaneRecord, LaneRecord]:
    """`run --compare`'s two lanes, the speculative one first, on a clock slowed 3x from
    `slow_from_s` to `slow_until_s` of simulated time."""
    backend = scripted_backend(drafters=("near",))
    engine = SpecEngine(backend, clock=LoadedClock(backend.clock, slow_from_s=slow_from_s, slow_until_s=slow_until_s))
    ids = tuple(backend.encode(prompt, raw=True))
    records = []
    for mode in ("speculative", "target"):
        record = LaneRecord(mode)
        request = Request(prompt, ids, mode, 0, TOKENS, ignore_eos=True)  # type: ignore[arg-type]
        for event in engine.generate(request, LiveControls(SpecSettings(route=route, k=4), engine.drafters)):
            record.add(event)
        records.append(record)
    return records[0], records[1]


def lane_events(slow: tuple[float, float], route: str = "none") -> dict[str, list[Event]]:
    """The two lanes' events by lane, as a session holds them."""
    main, baseline = measured_lanes(*slow, route=route)
    return {"speculative": main.events, "target": baseline.events}
