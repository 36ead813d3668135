"""Settings another thread may change while a generation runs; the engine reads them between rounds."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from specplay.engine.router import check_route
from specplay.engine.settings import GROUPS, SpecSettings


class LiveControls:
    def __init__(self, settings: SpecSettings, drafters: Sequence[str] = ()) -> None:
        if drafters:
            check_route(settings.route, drafters)
        self._settings = settings
        self._drafters = tuple(drafters)
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def settings(self) -> SpecSettings:
        with self._lock:
            return self._settings

    def update(self, **changes: Any) -> SpecSettings:
        """Change settings from any thread; a bad value raises here, in the caller's thread."""
        with self._lock:
            new = self._settings.changed(**changes)
            if self._drafters:
                check_route(new.route, self._drafters)
            self._settings = new
            return new

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()


def settings_diff(old: SpecSettings, new: SpecSettings) -> tuple[tuple[str, Any, Any], ...]:
    """(name, old, new) for each changed setting, the groups' fields (sampling...) flattened."""

    def flat(settings: SpecSettings) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(settings):
            value = getattr(settings, f.name)
            if f.name in GROUPS:
                out.update({g.name: getattr(value, g.name) for g in fields(value)})
            else:
                out[f.name] = value
        return out

    before, after = flat(old), flat(new)
    return tuple((name, before[name], after[name]) for name in before if before[name] != after[name])
