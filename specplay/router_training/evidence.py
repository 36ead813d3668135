"""What the sessions recorded here say of each route: a class of prompt whose drafter measured
below target-only speed in them goes to `none`, and `--route auto` says why.

A session counts for a (class, drafter) pair where its speculative lane ran on this run's target
with that drafter (same kind and settings), pinned or sent there by auto (an adaptive run's rounds
mix drafters, so it says nothing of one), under this run's sampling and acceptance rule (they set
how much is kept: a drafter that loses under lossless acceptance may pay under a TV budget), and a
target-only lane ran beside it on this machine (wall time a speed). The class is what the
heuristic router calls the session's prompt; each turn of a conversation counts with its own
prompt's class, as `--route auto` routed it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from specplay.config.run_config import TARGET, RunConfig
from specplay.drafters import ModelConfig, kind_of
from specplay.engine.routers.routing import CodeProseRouter, route_map_for
from specplay.engine.settings import ADAPTIVE_ROUTE, NONE_ROUTE, ROUTE_SETTINGS, SpecSettings
from specplay.errors import SpecplayError
from specplay.store import list_session_files, load_session
from specplay.store.format import Session

RECENT = 20
"""Sessions read, the newest: older ones may be of another machine's load or another version, and
each is read whole when a run starts."""
AT_LEAST = 2
"""Sessions a verdict needs: one run may have met a busy machine."""


@dataclass(frozen=True, slots=True)
class RouteEvidence:
    """Measured speedups of one drafter on one class of prompt, over recorded sessions."""

    prompt_class: str
    drafter: str
    speedups: tuple[float, ...]
    """One a turn: a conversation's turns are each routed and measured."""
    sessions: int
    """The sessions the speedups came from: a conversation's turns ran back to back, on one load."""

    @property
    def median(self) -> float:
        return statistics.median(self.speedups)

    def note(self) -> str:
        n = len(self.speedups)
        runs = f"{n} sessions" if n == self.sessions else f"{n} turns of {self.sessions} sessions"
        return f"{self.drafter} measured {self.median:.2f}× on {self.prompt_class} here ({runs})"


def _matches(model: ModelConfig, record: Mapping[str, Any]) -> bool:
    """A session's model record is this drafter: of the same kind and settings, or a model
    from the same location."""
    return kind_of(model).matches(model, record)


def _judged_alike(recorded: SpecSettings, settings: SpecSettings) -> bool:
    """The same sampling and acceptance rule: what decides how many drafted tokens are kept."""
    same_rule = recorded.rule == settings.rule and recorded.rule_params == settings.rule_params
    return same_rule and recorded.sampling == settings.sampling


def route_records(config: RunConfig, sessions: Iterable[Session]) -> dict[tuple[str, str], RouteEvidence]:
    """Each (class, drafter) pair's measured speedups over `sessions` (module docstring)."""
    router = CodeProseRouter()
    found: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for session in sessions:
        models = (session.header.get("backend") or {}).get("models") or {}
        if not _matches(config.target, models.get(TARGET) or {}):
            continue
        for turn in session.turns:  # a conversation's turns are routed and measured one by one
            start = turn.main.start
            speedup = session.speedup_of(turn)
            if start is None or start.mode != "speculative" or speedup is None or start.drafter is None:
                continue
            if start.settings.route == ADAPTIVE_ROUTE or turn.main.route_switches:
                continue  # its rounds mixed drafters
            if not _judged_alike(start.settings, config.settings):
                continue
            drafter = next((d for d in config.drafters if d.name == start.drafter), None)
            if drafter is None or not _matches(drafter, models.get(drafter.name) or {}):
                continue
            found.setdefault((router.classify(turn.prompt), drafter.name), []).append((speedup, session.id))
    return {
        key: RouteEvidence(*key, tuple(s for s, _ in values), len({name for _, name in values}))
        for key, values in found.items()
    }


def recent_sessions(config: RunConfig) -> list[Session]:
    """The newest RECENT sessions of the run's sessions folder that can be read (others skipped:
    advice is no reason to stop a run)."""
    try:
        paths = list_session_files(config.sessions_dir)[-RECENT:]
    except SpecplayError:
        return []
    sessions = []
    for path in paths:
        try:
            sessions.append(load_session(path))
        except SpecplayError:
            continue
    return sessions


def with_route_evidence(config: RunConfig, named_by_user: Iterable[str] = ()) -> RunConfig:
    """`config` with each class whose drafter lost in the recorded sessions sent to `none`, with
    the note that says so; classes the user mapped on this command line keep their drafter. Only
    for the heuristic router's classes (a learned router's are drafters), and only where a router
    chooses the route (a pinned route reads no map: no session is read)."""
    choosing = config.settings.route in ROUTE_SETTINGS and config.request.mode == "speculative"
    if not choosing or config.router is not None or not config.drafters or config.native:
        return config
    resolved = route_map_for(CodeProseRouter(), config.drafter_names, config.route_map)
    records = route_records(config, recent_sessions(config))
    changed, notes = dict(config.route_map), dict(config.route_notes)
    for cls, drafter in resolved.items():
        if cls in named_by_user or drafter == NONE_ROUTE:
            continue
        record = records.get((cls, drafter))
        if record is not None and record.sessions >= AT_LEAST and record.median < 1.0:
            changed[cls] = NONE_ROUTE
            notes[cls] = record.note()
    if changed == dict(config.route_map):
        return config
    return replace(config, route_map=changed, route_notes=notes)
