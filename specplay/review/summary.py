"""What a review says before the texts: where the runs came from, their settings, and per column
the numbers a reader weighs against the text (acceptance, speedups, TV spent, similarity).

Plain, unescaped strings: each document escapes them for its own format.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specplay.display.text import counted
from specplay.engine.disturbance import speedup_disturbance
from specplay.engine.settings import GROUPS
from specplay.engine.speedup import measured_speedup, predict, predict_modelled
from specplay.review.columns import Column, target_step_ms
from specplay.store.changes import lane_settings
from specplay.store.format import LaneRecord, Session

LEGEND = (
    ("accepted", "a draft token the verifier kept"),
    ("relaxed", "kept only because of a relaxed rule (the TV budget or another)"),
    ("corrected", "drawn from the residual after a rejection"),
    ("bonus", "the target's own token after a fully accepted round"),
)

INCOMPLETE = "Incomplete session: the run was cut short; lanes show the tokens they had produced."

METRICS = (
    "num_tokens",
    "tokens_per_s",
    "time_to_first_token_ms",
    "num_spec_steps",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_per_position",
    "num_tokens_by_source",
    "tv_spent",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
)
"""vLLM-named metrics in the order a reader wants them; any others a session holds follow."""


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt_value(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt_value(v) for v in value) + "]"
    return str(value)


def fmt_setting(value: Any) -> str:
    """A setting as typed: 0.5, not 0.500."""
    return f"{value:g}" if isinstance(value, float) else fmt_value(value)


def models_of(backend: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, source, short weights hash) of every model a backend's description names."""
    out = []
    for name, identity in (backend.get("models") or {}).items():
        digest = str(identity.get("weights_sha256", ""))[:12] or "-"
        if identity.get("weights_hash") == "sampled":
            digest += " (sampled)"
        out.append((str(name), str(identity.get("source", "?")), digest))
    return out


def flatten_settings(settings: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    # Grouped fields (sampling, policy and rule parameters) are flattened, as live control changes name them.
    for name, value in settings.items():
        if isinstance(value, dict) and name in GROUPS:
            yield from value.items()
        else:
            yield name, value


def settings(session: Session) -> list[tuple[str, str]]:
    """The request and the main lane's settings, as (name, value): "start → end" for a setting the
    user changed during the run, so that no reader takes the start value for the whole text."""
    request = session.header.get("request") or {}
    start = session.main.start if session.header.get("lanes") else None
    rows = [(str(k), fmt_setting(v)) for k, v in request.items()]
    if start is None:
        return rows
    end = {name: new for change in session.main.changes for name, _, new in change.changes}
    named = [("drafter", drafters_text(session.main))] if start.drafter is not None else []
    named += list(flatten_settings(asdict(start.settings)))
    for name, value in named:
        shown = fmt_setting(value)
        if name in end and end[name] != value:
            shown += f" → {fmt_setting(end[name])}"
        rows.append((str(name), shown))
    return rows


def drafters_text(lane: LaneRecord) -> str:
    """The lane's drafter, or where several served its rounds, each with its count of rounds."""
    assert lane.start is not None and lane.start.drafter is not None
    served: dict[str, int] = {}
    for event in lane.rounds:
        served[event.drafter] = served.get(event.drafter, 0) + 1
    if len(served) < 2:
        return lane.start.drafter
    ranked = sorted(served.items(), key=lambda item: -item[1])
    switches = len(lane.route_switches)
    served_rounds = ", ".join(f"{name} {counted(rounds, 'round')}" for name, rounds in ranked)
    return f"{served_rounds} ({switches} switch{'es' * (switches != 1)})"


def sampled(lane: LaneRecord) -> bool:
    """Whether a lane drew tokens at a temperature above 0, from its start or after a live change."""
    start = lane.start
    temperatures = [start.settings.sampling.temperature] if start is not None else []
    temperatures += [after.settings.sampling.temperature for _, after in lane_settings(lane)]
    return any(t > 0 for t in temperatures)


LOSSLESS_NOTE = (
    "Sampled at a temperature above 0: a lossless rule (TV budget 0) keeps the target's distribution, "
    "not its text. A speculative text may part from this one target-only sample and still be drawn exactly "
    "as the target draws: specplay fidelity compares the distributions over many samples."
)


def metric_rows(lanes: Sequence[LaneRecord]) -> list[tuple[str, list[str]]]:
    """(metric, value per lane), vLLM's names first."""
    names = list(METRICS)
    for lane in lanes:
        names += [name for name in lane.metrics if name not in names]
    rows = [(name, [fmt_value(lane.metrics.get(name)) for lane in lanes]) for name in names]
    rows.append(("finish_reason", [fmt_value(lane.done.finish_reason if lane.done else None) for lane in lanes]))
    return rows


_MLX_DEVICE = re.compile(r"^Device\((\w+), \d+\)$")


def _where(backend: dict[str, Any]) -> str:
    if "device" in backend:  # older sessions wrote MLX's "Device(cpu, 0)"
        device = _MLX_DEVICE.sub(r"\1", str(backend["device"]))
        return f"on {device}"
    return f"({backend['mode']} mode)" if "mode" in backend else "on ?"


def _made_by(session: Session) -> str:
    header, backend = session.header, session.header.get("backend") or {}
    return f"by specplay {header.get('specplay_version', '?')}, backend {backend.get('backend', '?')} {_where(backend)}"


def origin(session: Session) -> str:
    """When, by which specplay, on which backend and device."""
    return f"Created {session.header.get('created', '?')} {_made_by(session)}."


def origins(sessions: Sequence[Session]) -> list[str]:
    """One line for sessions made alike (one specplay, backend and device), else one each."""
    if len(sessions) == 1 or len({_made_by(s) for s in sessions}) > 1:
        return [origin(s) + ("" if len(sessions) == 1 else f" ({s.id})") for s in sessions]
    created = sorted(str(s.header.get("created", "?")) for s in sessions)
    return [f"{len(sessions)} sessions created {created[0]} to {created[-1]} {_made_by(sessions[0])}."]


def change_lines(lane: LaneRecord) -> list[str]:
    """One line per live control change: at which token, and what changed."""
    lines = []
    for change in lane.changes:
        what = ", ".join(f"{name} {fmt_setting(old)} → {fmt_setting(new)}" for name, old, new in change.changes)
        lines.append(f"token {change.token_index}: {what}")
    return lines


@dataclass(frozen=True)
class ColumnNumbers:
    """The per-column row of a review's summary."""

    tokens: int
    draft_acceptance_rate: float | None
    mean_acceptance_length: float | None
    tokens_per_s: float | None
    """None where the run's wall time was HTTP round trips."""
    measured_speedup: float | None
    predicted_speedup: float | None
    tv_spent: float | None
    similarity: float | None
    """Normalized Levenshtein similarity of the token ids to the target-only text."""
    first_divergence: int | None
    disturbed_reason: str | None = None
    """Why the measured speedup is disturbed: the machine's speed moved while either lane ran
    (`speedup_disturbance`, as `specplay run` and `specplay sessions` say it); None: it did not,
    or the lanes were recorded without their drift."""


def column_numbers(column: Column, reference: Column | None, baseline: LaneRecord | None = None) -> ColumnNumbers:
    """Speedups are against the column's own run's target-only lane (`baseline`) where it has one,
    as the session itself records its speedup, else the reference's; where both were speeds."""
    metrics = column.lane.metrics
    speculative = column.kind == "speculative"
    speed = column.wall_time_is_speed
    tokens_per_s = metrics.get("tokens_per_s") if speed else None
    ref_speed = reference is not None and reference.wall_time_is_speed and reference is not column
    measured = predicted = disturbed = None
    if speculative:
        if speed and (baseline is not None or ref_speed):
            against = baseline if baseline is not None else reference.lane  # type: ignore[union-attr]
            measured = measured_speedup(tokens_per_s, against.metrics.get("tokens_per_s"))
            predicted = predict(metrics, target_step_ms(against)).speedup
            disturbed = speedup_disturbance(metrics, against.metrics) if measured is not None else None
        elif not speed:  # remote: modelled on the speculative lane's own verify calls
            predicted = predict_modelled(metrics).speedup
    against = column.divergence
    return ColumnNumbers(
        tokens=len(column.lane.tokens),
        draft_acceptance_rate=metrics.get("draft_acceptance_rate") if speculative else None,
        mean_acceptance_length=metrics.get("mean_acceptance_length") if speculative else None,
        tokens_per_s=tokens_per_s,
        measured_speedup=measured,
        predicted_speedup=predicted,
        tv_spent=metrics.get("tv_spent") if speculative else None,
        similarity=against.diff.similarity if against is not None else (1.0 if column is reference else None),
        first_divergence=against.diff.first_divergence if against is not None else None,
        disturbed_reason=disturbed,
    )


SUMMARY_HEADERS = (
    "column",
    "tokens",
    "acceptance",
    "mean acc. length",
    "tokens/s",
    "measured speedup",
    "predicted speedup",
    "TV spent",
    "similarity",
    "first divergence",
)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def measured_cell(numbers: ColumnNumbers) -> str:
    """The measured speedup, and where the machine's speed moved while it was measured, why."""
    if numbers.measured_speedup is None:
        return "-"
    busy = f" busy: {numbers.disturbed_reason}" if numbers.disturbed_reason else ""
    return f"{numbers.measured_speedup:.2f}x{busy}"


def summary_cells(column: Column, numbers: ColumnNumbers) -> list[str]:
    """One summary row, in SUMMARY_HEADERS' order."""
    divergence = "-" if column.divergence is None else "none"
    if numbers.first_divergence is not None:
        divergence = f"token {numbers.first_divergence}"
    return [
        column.title,
        str(numbers.tokens),
        _num(numbers.draft_acceptance_rate, ".2f"),
        _num(numbers.mean_acceptance_length, ".2f"),
        _num(numbers.tokens_per_s, ".1f"),
        measured_cell(numbers),
        _num(numbers.predicted_speedup, ".2f") + ("x" if numbers.predicted_speedup is not None else ""),
        _num(numbers.tv_spent, ".3f"),
        _num(numbers.similarity, ".3f"),
        divergence,
    ]
