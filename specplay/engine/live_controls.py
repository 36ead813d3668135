"""Settings another thread may change while a generation runs; the engine reads them between rounds."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specplay.engine.capabilities import Capabilities, check_supported
from specplay.engine.routers.routing import check_route
from specplay.engine.settings import SamplingParams, SpecSettings, flattened

SAMPLING_FIELDS = frozenset(SamplingParams.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """A live change, checked once where it is made (`checked_change`) and then handed to each
    lane it reaches, which applies it to its own settings without checking it again."""

    values: Mapping[str, Any]
    """The settings it moves (a group's fields, such as temperature, by their own names)."""
    settings: SpecSettings
    """The settings it makes of those it was checked against."""

    @property
    def sampling_only(self) -> bool:
        """Only sampling moves: what a target-only lane takes too, so both lanes sample alike."""
        return set(self.values) <= SAMPLING_FIELDS

    def applied_to(self, settings: SpecSettings) -> SpecSettings:
        return settings.changed(**self.values)

    def supported_by(self, capabilities: Capabilities) -> SettingsChange:
        """Itself, once its settings are ones the backend can run (a ConfigError says why not:
        a tree under a relaxed rule)."""
        check_supported(self.settings, capabilities)
        return self


def checked_change(settings: SpecSettings, drafters: Sequence[str], **values: Any) -> SettingsChange:
    """The change `values` make to `settings`; a ConfigError names a value out of range or a route
    that is none of `drafters` (nor a route setting)."""
    new = settings.changed(**values)
    if drafters:
        check_route(new.route, drafters)
    return SettingsChange(values=dict(values), settings=new)


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
            return self._apply(checked_change(self._settings, self._drafters, **changes))

    def apply(self, change: SettingsChange) -> SpecSettings:
        """A change already checked (by `checked_change`, against settings these share its route
        checks with), from any thread."""
        with self._lock:
            return self._apply(change)

    def _apply(self, change: SettingsChange) -> SpecSettings:
        self._settings = change.applied_to(self._settings)
        return self._settings

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()


def settings_diff(old: SpecSettings, new: SpecSettings) -> tuple[tuple[str, Any, Any], ...]:
    """(name, old, new) for each changed setting, the groups' fields (sampling...) flattened."""
    before, after = flattened(old), flattened(new)
    return tuple((name, before[name], after[name]) for name in before if before[name] != after[name])
