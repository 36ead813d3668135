"""Live changes as a session records them, applied to the settings they change.

A control event holds (setting, old, new) as the engine wrote it, but a session edited by hand,
or written by a newer specplay with a live setting this one lacks, may name a setting or hold a
value these settings do not take. Every reader that applies recorded changes (the playground,
diff's lossless check, a review's sampling note) goes through `settings_after`: it applies what
it can and says in one line each what it skipped, so one bad change never hides the session.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from specplay.engine.events import ControlEvent
from specplay.engine.settings import GROUPS, SpecSettings
from specplay.errors import ConfigError
from specplay.store.format import LaneRecord
from specplay.store.schema import SchemaError, build

_NAME_LIMIT = 40  # a setting's name in a message: a hostile one may be any length


@functools.cache
def _setting_types() -> dict[str, Any]:
    """Each live setting's declared type, by the name control events give it (groups flattened)."""
    types: dict[str, Any] = {}
    for name, kind in typing.get_type_hints(SpecSettings).items():
        if name in GROUPS:
            types.update(typing.get_type_hints(kind))
        else:
            types[name] = kind
    return types


def applied(settings: SpecSettings, name: str, value: Any) -> SpecSettings:
    """`settings` with one recorded change; a SchemaError says why it cannot take it."""
    kind = _setting_types().get(name)
    if kind is None:
        raise SchemaError(f"{name[:_NAME_LIMIT]!r} is not a setting this specplay knows")
    try:
        # The value is checked as the session's start settings are: its type, then its range.
        return settings.changed(**{name: build(kind, value, name)})
    except ConfigError as error:  # a value of the right type out of the setting's range (a k of 0)
        raise SchemaError(str(error)) from None


@dataclass(frozen=True)
class Applied:
    """The settings after one control event, and the changes of it that were not applied."""

    settings: SpecSettings
    skipped: tuple[str, ...] = ()
    """One line per change left out: at which token, and why."""


def settings_after(settings: SpecSettings, event: ControlEvent) -> Applied:
    """`settings` with every change of `event` that it can take, in order; the rest skipped."""
    skipped = []
    for name, _old, new in event.changes:
        try:
            settings = applied(settings, name, new)
        except SchemaError as error:
            skipped.append(f"token {event.token_index}: a live change was skipped: {error}")
    return Applied(settings, tuple(skipped))


def lane_settings(lane: LaneRecord) -> Iterator[tuple[ControlEvent, Applied]]:
    """Each of a lane's live changes with the settings in force after it, from its start settings."""
    settings = lane.settings
    for change in lane.changes:
        after = settings_after(settings, change)
        settings = after.settings
        yield change, after


def skipped_changes(lanes: typing.Iterable[LaneRecord]) -> list[str]:
    """Every recorded live change of `lanes` that cannot be applied, one line each, with its lane."""
    return [f"{lane.name} lane, {line}" for lane in lanes for _, after in lane_settings(lane) for line in after.skipped]
