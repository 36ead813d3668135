"""Building the playground on the tests' tiny models, and waiting on its state."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from specplay.backends.mlx import load_mlx_backend, release_thread
from specplay.engine.events import Event, RoundEvent
from specplay.ui.app import PlaygroundApp, PlaygroundOptions, create_app
from tests.conftest import TinyModels


def make_app(
    tiny: TinyModels, sessions: Path, clock: Callable[[], float] | None = None, **options: Any
) -> PlaygroundApp:
    """The app with target, near and far; its own model thread loads them (MLX state is per thread)."""
    drafters = [("near", str(tiny.near)), ("far", str(tiny.far))]
    opts = PlaygroundOptions(sessions_dir=sessions, **options)
    extra = {"clock": clock} if clock is not None else {}
    return create_app(lambda: load_mlx_backend(str(tiny.target), drafters), opts, on_exit=release_thread, **extra)


async def wait_for(pilot: Pilot[None], condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll app state between pauses (which let pending messages through); never a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


def spec_rounds(app: PlaygroundApp) -> list[RoundEvent]:
    return [e for e in app.events["speculative"] if isinstance(e, RoundEvent)]


def after(events: list[Event], index: int) -> list[RoundEvent]:
    return [e for e in events[index + 1 :] if isinstance(e, RoundEvent)]
