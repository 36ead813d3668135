"""Building the playground on the scripted backend, the tests' tiny models or servers of them, and
waiting on its state."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from textual.app import App
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget

from specplay.config.run_config import RequestConfig, RunConfig, VllmOptions
from specplay.drafters import ModelConfig
from specplay.engine.events import Event, RoundEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.routers.routing import routing_for
from specplay.engine.settings import SpecSettings
from specplay.runner.host import OpenStream
from specplay.ui.app import PlaygroundApp, PlaygroundOptions, create_app
from specplay.ui.lane_board import LaneBoard
from specplay.ui.protocols import LaneItem
from tests.support.scripted import ScriptedBackend

if TYPE_CHECKING:  # building them imports MLX, which the scripted backend's tests never load
    from tests.support.tiny_models import TinyModels

_OPTIONS = set(PlaygroundOptions.__dataclass_fields__)


def mlx_config(
    tiny: TinyModels, sessions: Path, settings: SpecSettings | None = None, target: Path | None = None, **request: Any
) -> RunConfig:
    """Target, near and far on MLX; `request` holds RequestConfig fields."""
    drafters = (
        ModelConfig("near", "drafter", "mlx", str(tiny.near)),
        ModelConfig("far", "drafter", "mlx", str(tiny.far)),
    )
    target_spec = ModelConfig("target", "target", "mlx", str(target or tiny.target))
    return RunConfig(
        target=target_spec,
        drafters=drafters,
        request=RequestConfig(**request),
        settings=settings or SpecSettings(),
        sessions_dir=sessions,
    )


def scripted_config(
    backend: ScriptedBackend, sessions: Path, settings: SpecSettings | None = None, **request: Any
) -> RunConfig:
    """A configuration naming the scripted backend's drafters (opened by `scripted_stream`)."""
    drafters = tuple(
        ModelConfig(name, "drafter", "prompt-lookup", "", {"n_min": n_min, "n_max": n_max})
        if (n_min, n_max) != (0, 0)
        else ModelConfig(name, "drafter", "mlx", f"scripted:{name}")
        for name, (n_min, n_max) in ((d, backend.lookups.get(d, (0, 0))) for d in backend.drafters)
    )
    return RunConfig(
        target=ModelConfig("target", "target", "mlx", "scripted:target"),
        drafters=drafters,
        request=RequestConfig(**request),
        settings=settings or SpecSettings(),
        sessions_dir=sessions,
    )


def scripted_stream(backend: ScriptedBackend) -> OpenStream:
    """Opens the engine over `backend`, timed by its simulated clock, with the configuration's route map."""
    return lambda config: SpecEngine(
        backend, routing_for(backend.drafters, route_map=config.route_map), clock=backend.clock
    )


def scripted_app(backend: ScriptedBackend, sessions: Path, **kwargs: Any) -> PlaygroundApp:
    """The app on the scripted backend, its lanes timed by the backend's simulated clock;
    playground options and request fields by keyword."""
    options = {k: v for k, v in kwargs.items() if k in _OPTIONS}
    config = scripted_config(backend, sessions, **{k: v for k, v in kwargs.items() if k not in _OPTIONS})
    return create_app(config, PlaygroundOptions(**options), backend.clock, scripted_stream(backend))


def server_config(
    target_url: str,
    drafters: dict[str, str],
    sessions: Path,
    settings: SpecSettings | None = None,
    vllm: VllmOptions | None = None,
    **request: Any,
) -> RunConfig:
    """A target and drafters on (fake) vLLM servers."""
    return RunConfig(
        target=ModelConfig("target", "target", "server", target_url),
        drafters=tuple(ModelConfig(name, "drafter", "server", url) for name, url in drafters.items()),
        backend="vllm",
        vllm=vllm or VllmOptions(),
        request=RequestConfig(**request),
        settings=settings or SpecSettings(),
        sessions_dir=sessions,
    )


def app_for(config: RunConfig, clock: Callable[[], float] | None = None, **options: Any) -> PlaygroundApp:
    extra = {"clock": clock} if clock is not None else {}
    return create_app(config, PlaygroundOptions(**options), **extra)


def make_app(
    tiny: TinyModels, sessions: Path, clock: Callable[[], float] | None = None, **kwargs: Any
) -> PlaygroundApp:
    """The app on target, near and far; playground options and request fields by keyword."""
    options = {k: v for k, v in kwargs.items() if k in _OPTIONS}
    config = mlx_config(tiny, sessions, **{k: v for k, v in kwargs.items() if k not in _OPTIONS})
    return app_for(config, clock, **options)


async def wait_for(pilot: Pilot[None], condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll app state between pauses (which let pending messages through); never a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


def screen_rows(app: App[Any]) -> list[str]:
    """The screen as drawn, one string a row: what a screenshot shows, as text (as Textual's own
    export_screenshot renders it)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, force_terminal=True, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text().split("\n")[:height]


def drawn(app: App[Any], region: Region) -> list[str]:
    """The rows of `region` (a widget's content region, say) as drawn on screen, trailing blanks left out."""
    rows = screen_rows(app)
    return [rows[y][region.x : region.right].rstrip() for y in range(region.y, region.bottom)]


async def every_row(pilot: Pilot[None], box: Widget) -> list[str]:
    """The rows drawn inside a scrolling `box`, scrolled a view at a time from its top to its
    end, each row once."""
    rows: list[str] = []
    height = box.scrollable_content_region.height
    for top in range(0, box.max_scroll_y + height, height):
        box.scroll_to(y=min(top, box.max_scroll_y), animate=False, immediate=True)
        await pilot.pause()
        shown = drawn(pilot.app, box.scrollable_content_region)
        rows += shown[len(rows) - round(box.scroll_y) :]
    return rows


def spec_rounds(app: PlaygroundApp) -> list[RoundEvent]:
    return [e for e in app.playground.events["speculative"] if isinstance(e, RoundEvent)]


def after(events: list[Event], index: int) -> list[RoundEvent]:
    return [e for e in events[index + 1 :] if isinstance(e, RoundEvent)]


class RoundHold:
    """Holds the model thread at `lane`'s next round, as the round is queued for the screen, until
    `release`: a live change made meanwhile takes effect from the round after, however far the
    screen (or a busy machine) lags behind the lanes."""

    def __init__(self, board: LaneBoard, lane: str = "speculative") -> None:
        self.reached, self._go_on = threading.Event(), threading.Event()
        queue = board.queue

        def queue_then_wait(item: LaneItem) -> None:  # on the model thread
            queue(item)
            if item.lane == lane and isinstance(item.event, RoundEvent) and not self._go_on.is_set():
                self.reached.set()
                self._go_on.wait(30)

        board.queue = queue_then_wait  # type: ignore[method-assign]

    def release(self) -> None:
        self._go_on.set()
