"""A review: runs of one prompt lined up against its target-only text, with what a reader needs
before reading them. Built from saved sessions (`specplay export`) or a fidelity sweep's samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specplay.engine.rules import Mentored
from specplay.errors import SpecplayError
from specplay.review.columns import Column, Kind, build_columns
from specplay.review.conversation import CAPTION as CONVERSATION_CAPTION
from specplay.review.conversation import CONTINUES_NOTE, conversation_rows, parted_before_the_last_turn
from specplay.review.summary import (
    INCOMPLETE,
    LOSSLESS_NOTE,
    SUMMARY_HEADERS,
    change_lines,
    column_numbers,
    models_of,
    origins,
    sampled,
    settings,
    summary_cells,
)
from specplay.store.diff import token_diff
from specplay.store.format import LaneRecord, Session, TurnRecord


@dataclass(frozen=True)
class Group:
    """Columns aligned row by row to one target-only text (a page has one; a sweep one per seed)."""

    title: str | None
    columns: list[Column]
    reference: Column | None
    baselines: Mapping[str, LaneRecord] = field(default_factory=dict)
    """A speculative column's own run's target-only lane, by column key, where that run had one:
    its speedup divides by it, as `specplay sessions` does, not by the page's reference."""
    prompt: str | None = None
    """A conversation turn's prompt, shown before its texts (None: the page's one prompt)."""
    tables: list[Table] = field(default_factory=list)
    """Tables shown before the group's summary (a fidelity sweep's over a turn's seeds)."""

    def summary_rows(self) -> list[list[str]]:
        return [summary_cells(c, column_numbers(c, self.reference, self.baselines.get(c.key))) for c in self.columns]

    @property
    def parts_early(self) -> bool:
        """Whether a column leaves the reference's text within its first quarter: rows lined up
        to the reference then cut the other texts into pieces, and prose reads better."""
        if self.reference is None:
            return False
        early = len(self.reference.lane.tokens) * PROSE_BEFORE_SHARE
        return any(
            (at := c.divergence.diff.first_divergence) is not None and at < early
            for c in self.columns
            if c.divergence is not None
        )


@dataclass(frozen=True)
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass(frozen=True)
class Review:
    title: str
    prompt: str
    notes: list[str]
    """Where the runs came from, and anything odd about them."""
    models: list[tuple[str, str, str]]
    settings: list[tuple[str, str]]
    """Settings every run shared."""
    column_settings: dict[str, list[tuple[str, str]]]
    """Per column key: the settings that set it apart from the other runs."""
    groups: list[Group]
    tables: list[Table] = field(default_factory=list)
    """Tables shown after the summary (a sweep's aggregate over seeds)."""
    changes: dict[str, list[str]] = field(default_factory=dict)
    """Per column key: live control changes, one line each."""
    warnings: list[str] = field(default_factory=list)
    """What a reader must know first: runs that were cut short."""

    @property
    def conversation(self) -> bool:
        """Whether the page shows a conversation turn by turn, each group with its turn's prompt."""
        return any(group.prompt is not None for group in self.groups)

    @property
    def prose_first(self) -> bool:
        """Show each text as flowing prose, not lined up row by row, unless asked otherwise."""
        return any(group.parts_early for group in self.groups)


OWN_BASELINE_NOTE = (
    "Each run's measured speedup divides by its own target-only lane's tokens/s, as `specplay sessions` "
    "shows it; the texts line up against the first target-only text."
)
PROSE_BEFORE_SHARE = 0.25
"""A review reads as prose by default when a text parts from the reference this early."""

# Settings that say where or when a run was, not how: never what sets a column apart.
_NOT_SETTINGS = {"source", "lanes_run_side_by_side"}
_SHORT = {Mentored.knob.setting.field: Mentored.knob.symbol, "temperature": "T"}


def _short(settings: Sequence[tuple[str, str]]) -> str:
    return " · ".join(f"{_SHORT.get(name, name)} {value}" for name, value in settings)


def _split_settings(
    per_run: Sequence[list[tuple[str, str]]],
) -> tuple[list[tuple[str, str]], list[list[tuple[str, str]]]]:
    """(settings all runs share, each run's own)."""
    common = [item for item in per_run[0] if all(item in other for other in per_run[1:])]
    own = [[item for item in run if item not in common and item[0] not in _NOT_SETTINGS] for run in per_run]
    return common, own


def review_sessions(sessions: Sequence[Session]) -> Review:
    """One page for sessions of one prompt: a single session shows its lanes; several show each
    one's speculative (or only) lane beside the first target-only lane among them. Sessions of a
    conversation show it turn by turn: each turn's prompt, then its answers lined up as a run of
    one prompt is, and the whole conversation's numbers first."""
    if not sessions:
        raise SpecplayError("no session to review; name one or more sessions")
    first = sessions[0]
    _check_same_prompts(sessions)
    notes = origins(sessions)
    if any(sampled(lane) for s in sessions for turn in s.turns for lane in turn.lanes.values()):
        notes.append(LOSSLESS_NOTE)
    turns = max(len(s.turns) for s in sessions)
    texts = {s.id: s.token_texts for s in sessions}  # read off every record: once per session
    groups: list[Group] = []
    own: dict[str, Settings] = {}
    slots: dict[str, str] = {}
    common = settings(first)
    for turn in range(turns):
        present = [s for s in sessions if turn < len(s.turns)]
        built = _turn_group(present, turn, turns, texts)
        groups.append(built.group)
        own |= built.own
        slots |= built.slots
        common = built.common if turn == 0 else common
        notes += built.notes
    tables = []
    if turns > 1:
        notes += [
            f"Session {s.id} holds {len(s.turns)} of the {turns} turns." for s in sessions if len(s.turns) < turns
        ]
        if parted_before_the_last_turn(groups):
            notes.append(CONTINUES_NOTE)
        tables.append(
            Table(
                f"The whole conversation: {turns} turns",
                list(SUMMARY_HEADERS),
                conversation_rows(groups, slots),
                CONVERSATION_CAPTION,
            )
        )
    columns = [c for group in groups for c in group.columns]
    title = f"specplay session {first.id}" if len(sessions) == 1 else f"specplay review of {len(sessions)} sessions"
    all_models = list(dict.fromkeys(m for s in sessions for m in models_of(s.header.get("backend") or {})))
    return Review(
        title=title,
        prompt=first.prompt,
        notes=notes,
        models=all_models,
        settings=common,
        column_settings={c.key: own[c.key] for c in columns},
        groups=groups,
        tables=tables,
        changes={c.key: change_lines(c.lane) for c in columns if c.lane.changes},
        warnings=[INCOMPLETE + ("" if len(sessions) == 1 else f" ({s.id})") for s in sessions if not s.complete],
    )


def _check_same_prompts(sessions: Sequence[Session]) -> None:
    """Runs line up only where they answered the same prompt: each turn's, in a conversation."""
    first = sessions[0]
    for other in sessions[1:]:
        for a, b in zip(first.turns, other.turns, strict=False):
            if a.prompt == b.prompt:
                continue
            if a.index == 0:
                raise SpecplayError(
                    f"sessions {first.id} and {other.id} ran different prompts; a review lines up runs of one "
                    "prompt, so export them one at a time"
                )
            raise SpecplayError(
                f"sessions {first.id} and {other.id} asked turn {a.index + 1} differently; a review lines up "
                "runs of one conversation, so export them one at a time (specplay diff compares them turn by turn)"
            )


Settings = list[tuple[str, str]]


@dataclass(frozen=True)
class _TurnGroup:
    group: Group
    common: Settings
    """The settings every run shares."""
    own: dict[str, Settings]
    """By column key: the settings that set its run apart."""
    slots: dict[str, str]
    """By column key: the run and lane it shows, the same in every turn."""
    notes: list[str]


def _turn_group(
    sessions: Sequence[Session], turn: int, turns: int, texts: Mapping[str, Mapping[int, str]]
) -> _TurnGroup:
    """One turn of `sessions` as a group of columns lined up against its first target-only text.
    A session of one prompt is a conversation of one turn, shown as it always was."""
    first = sessions[0]
    records = [s.turns[turn] for s in sessions]
    prefix = "" if turns == 1 else f"t{turn}"
    reference_lane, reference_session = _reference(sessions, records)
    specs = []
    column_of: dict[str, Session] = {}
    baselines: dict[str, LaneRecord] = {}
    notes: list[str] = []
    if len(sessions) == 1:
        lanes = list(records[0].lanes.values())
        if reference_lane is not None:  # the target-only text first: the others are read against it
            lanes = [reference_lane] + [lane for lane in lanes if lane is not reference_lane]
        for i, lane in enumerate(lanes):
            key = f"{prefix}c{i}"
            title = "target-only" if lane is reference_lane else lane.name
            specs.append((key, title + ("" if lane.complete else " (incomplete)"), _kind(lane), lane))
            column_of[key] = first
            if _kind(lane) == "speculative" and lane is records[0].main and records[0].baseline is not None:
                baselines[key] = records[0].baseline
        common, own = settings(first), [[] for _ in specs]
    else:
        runs = [(s, r) for s, r in zip(sessions, records, strict=True) if r.main is not reference_lane]
        if reference_lane is not None:
            assert reference_session is not None
            specs.append((f"{prefix}c0", f"target-only ({reference_session.id})", "target", reference_lane))
            column_of[f"{prefix}c0"] = reference_session
        common, own_by_run = _split_settings([settings(s) for s, _ in runs] or [settings(first)])
        own = [[] for _ in specs] + own_by_run
        for i, (session, record) in enumerate(runs, start=len(specs)):
            key = f"{prefix}c{i}"
            title = _short(own[i]) or session.id
            title += "" if record.main.complete else " (incomplete)"
            specs.append((key, title, _kind(record.main), record.main))
            column_of[key] = session
            if _kind(record.main) == "speculative" and record.baseline is not None:
                baselines[key] = record.baseline
        at = "" if turns == 1 else f"Turn {turn + 1}: "
        notes += [at + note for note in _other_baselines(runs, reference_lane)]
        if any(r.baseline is not None and r.baseline is not reference_lane for _, r in runs):
            notes.append(at + OWN_BASELINE_NOTE)
    columns = build_columns(
        [
            (key, title, kind, lane, texts[column_of[key].id], column_of[key].capabilities.wall_time_is_speed)
            for key, title, kind, lane in specs
        ],
        reference_lane,
    )
    reference = next((c for c in columns if c.lane is reference_lane), None)
    title = None if turns == 1 else f"Turn {turn + 1} of {turns}{_routed(sessions, turn)}"
    prompt = None if turns == 1 else records[0].prompt
    group = Group(title, columns, reference, baselines=baselines, prompt=prompt)
    slots = {c.key: f"{column_of[c.key].id}/{c.lane.name}" for c in columns}
    return _TurnGroup(group, common, {c.key: own[i] for i, c in enumerate(columns)}, slots, notes)


def _routed(sessions: Sequence[Session], turn: int) -> str:
    """Where each run's route sent the turn's prompt and why, as the run recorded it (`auto`,
    `adaptive`): once where every run recorded the same, else each by its session's id; "" where
    none recorded one (another route, or a session older than the record)."""
    whys = [(session.id, session.turns[turn].route_text("why")) for session in sessions]
    recorded = [(name, why) for name, why in whys if why is not None]
    if not recorded:
        return ""
    if len(recorded) == len(whys) and len({why for _, why in recorded}) == 1:
        return f" · {recorded[0][1]}"
    return " · " + "; ".join(f"{name}: {why}" for name, why in recorded)


def _kind(lane: LaneRecord) -> Kind:
    mode = lane.start.mode if lane.start is not None else lane.name
    return "target" if mode == "target" else "draft" if mode == "draft" else "speculative"


def _reference(sessions: Sequence[Session], turns: Sequence[TurnRecord]) -> tuple[LaneRecord | None, Session | None]:
    """The first target-only lane of a turn: a speculative run's baseline, or a target-only run itself."""
    for session, turn in zip(sessions, turns, strict=True):
        if turn.baseline is not None:
            return turn.baseline, session
        if _kind(turn.main) == "target":
            return turn.main, session
    return None, None


def _other_baselines(runs: Sequence[tuple[Session, TurnRecord]], reference: LaneRecord | None) -> list[str]:
    """A run's own target-only text that differs from the reference is worth a line: the runs
    then did not share seed, models or settings, and a difference is not all speculation's."""
    notes = []
    for session, turn in runs:
        if reference is None or turn.baseline is None or turn.baseline is reference:
            continue
        diff = token_diff(turn.baseline.token_ids, reference.token_ids)
        if not diff.identical:
            notes.append(
                f"Session {session.id}'s own target-only text differs from the reference from token "
                f"{diff.first_divergence} (similarity {diff.similarity:.3f}): not every difference is speculation's."
            )
    return notes


def review_sweep(
    title: str,
    prompt: str,
    notes: list[str],
    run_models: list[tuple[str, str, str]],
    run_settings: list[tuple[str, str]],
    lanes_by_seed: Mapping[int, Mapping[str, LaneRecord]],
    tables: list[Table],
    wall_time_is_speed: bool,
    texts: Mapping[int, str],
    key_prefix: str = "",
) -> Review:
    """A sweep (rows such as target-only, draft-only, D=0 ... D=1) sampled with several seeds: one
    group per seed, each row a column aligned to that seed's target-only text. `key_prefix` sets
    apart its column keys from another sweep's on the same page (a conversation's turns)."""
    groups = []
    column_settings: dict[str, list[tuple[str, str]]] = {}
    for seed, lanes in lanes_by_seed.items():
        reference_lane = next((lane for lane in lanes.values() if _kind(lane) == "target"), None)
        specs = [
            (f"{key_prefix}s{seed}c{i}", label, _kind(lane), lane, texts, wall_time_is_speed)
            for i, (label, lane) in enumerate(lanes.items())
        ]
        columns = build_columns(specs, reference_lane)
        reference = next((c for c in columns if c.lane is reference_lane), None)
        groups.append(Group(f"seed {seed}", columns, reference))
        column_settings |= {c.key: [] for c in columns}
    if any(sampled(lane) for lanes in lanes_by_seed.values() for lane in lanes.values()):
        notes = [*notes, LOSSLESS_NOTE]
    return Review(
        title=title,
        prompt=prompt,
        notes=notes,
        models=run_models,
        settings=run_settings,
        column_settings=column_settings,
        groups=groups,
        tables=tables,
    )
