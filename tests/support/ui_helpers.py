"""Building the playground on the tests' tiny models (or servers of them), and waiting on its state."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from specplay.config.run_config import ModelSpec, RequestSpec, RunConfig, VllmOptions
from specplay.engine.events import Event, RoundEvent
from specplay.engine.settings import SpecSettings
from specplay.ui.app import PlaygroundApp, PlaygroundOptions, create_app
from tests.support.tiny_models import TinyModels

_OPTIONS = set(PlaygroundOptions.__dataclass_fields__)


def mlx_config(
    tiny: TinyModels, sessions: Path, settings: SpecSettings | None = None, target: Path | None = None, **request: Any
) -> RunConfig:
    """Target, near and far on MLX; `request` holds RequestSpec fields."""
    drafters = (ModelSpec("near", "drafter", "mlx", str(tiny.near)), ModelSpec("far", "drafter", "mlx", str(tiny.far)))
    target_spec = ModelSpec("target", "target", "mlx", str(target or tiny.target))
    return RunConfig(
        target=target_spec,
        drafters=drafters,
        request=RequestSpec(**request),
        settings=settings or SpecSettings(),
        sessions_dir=sessions,
    )


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
        target=ModelSpec("target", "target", "server", target_url),
        drafters=tuple(ModelSpec(name, "drafter", "server", url) for name, url in drafters.items()),
        backend="vllm",
        vllm=vllm or VllmOptions(),
        request=RequestSpec(**request),
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


def spec_rounds(app: PlaygroundApp) -> list[RoundEvent]:
    return [e for e in app.playground.events["speculative"] if isinstance(e, RoundEvent)]


def after(events: list[Event], index: int) -> list[RoundEvent]:
    return [e for e in events[index + 1 :] if isinstance(e, RoundEvent)]
