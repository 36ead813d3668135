"""`specplay sessions`: the saved runs, a line each."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.text import Text

from specplay.cli.configure import given, sessions_dir_from
from specplay.cli.flags import add_sessions_dir_flag
from specplay.cli.render import make_console
from specplay.display.text import visible
from specplay.engine.disturbance import speedup_disturbance
from specplay.engine.speedup import draft_acceptance_rate, mean_acceptance_length, measured_speedup
from specplay.errors import error_line
from specplay.files.json_text import dump_json
from specplay.store import LaneRecord, Session, SessionError, list_session_files, load_session


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sessions", help="list saved sessions")
    add_sessions_dir_flag(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per session, one per line")
    parser.add_argument(
        "-q", "--ids", action="store_true", help="only the ids, one a line (for diff, export, --open, --replay)"
    )
    parser.set_defaults(command=list_sessions)


def summarize(session: Session) -> dict[str, Any]:
    """What the listing shows of a session; a conversation's acceptance, speedup and similarity
    are over all its turns."""
    lane = session.main
    settings = lane.settings
    models = session.header.get("backend", {}).get("models", {})
    row: dict[str, Any] = {
        "id": session.id,
        "created": session.header.get("created"),
        "prompt": session.prompt,
        "turns": len(session.turns),
        "target": Path(models.get("target", {}).get("source", "?")).name,
        "mode": lane.start.mode if lane.start else None,
        "route": lane.start.drafter if lane.start else None,
        "route_why": session.turns[0].route_text("why"),
        "route_chosen_by": session.turns[0].route_text("chosen_by"),
        "route_deferred": session.turns[0].route_text("deferred"),
        "k": settings.k,
        "policy": settings.policy,
        "width": settings.width,
        "tree_nodes": settings.tree_nodes or settings.width * settings.k,
        "tv_budget": settings.rule_params.tv_budget,
        "rule": settings.acceptance_rule.describe(),
        "temperature": settings.sampling.temperature,
        **_acceptance(session.main_lanes),
        "speedup": None,
        "disturbed_reason": None,
        "similarity_to_target": None,
        "complete": session.complete,
    }
    from specplay.store.diff import token_diff

    pairs = [(turn.main, turn.baseline) for turn in session.turns if turn.baseline and turn.baseline.token_ids]
    if pairs:
        row["speedup"] = _speedup(session, pairs)
        if row["speedup"] is not None:  # as the run measured it: its lanes' drift, where recorded
            reasons = (speedup_disturbance(main.metrics, baseline.metrics) for main, baseline in pairs)
            row["disturbed_reason"] = next(filter(None, reasons), None)
        ids = [[i for lane in lanes for i in lane.token_ids] for lanes in zip(*pairs, strict=True)]
        row["similarity_to_target"] = token_diff(*ids).similarity
    return row


def _acceptance(lanes: Sequence[LaneRecord]) -> dict[str, float | None]:
    """Draft acceptance rate and mean acceptance length over the lanes' rounds together (a
    conversation's turns): its counts summed; a single lane's own metrics."""
    if len(lanes) == 1:
        metrics = lanes[0].metrics
        return {key: metrics.get(key) for key in ("draft_acceptance_rate", "mean_acceptance_length")}

    def total(key: str) -> float:
        return sum(lane.metrics.get(key) or 0 for lane in lanes)

    accepted, drafted, rounds = (
        total(key) for key in ("num_accepted_draft_tokens", "num_draft_tokens", "num_spec_steps")
    )
    return {
        "draft_acceptance_rate": draft_acceptance_rate(accepted, drafted),
        "mean_acceptance_length": mean_acceptance_length(accepted, rounds),
    }


def _speedup(session: Session, pairs: Sequence[tuple[LaneRecord, LaneRecord]]) -> float | None:
    """The measured speedup over the turns' (main, target-only) lanes: the main lanes' tokens over
    the time they took at their turns' rates, against the target-only lanes' (one turn: its own)."""
    if not session.capabilities.wall_time_is_speed:
        return None
    return measured_speedup(*(_rate(lanes) for lanes in zip(*pairs, strict=True)))


def _rate(lanes: Sequence[LaneRecord]) -> float | None:
    """Tokens/s over lanes run one after the other: their tokens over the time each took at its
    rate (one lane: its own)."""
    if len(lanes) == 1:
        return lanes[0].metrics.get("tokens_per_s")
    tokens, seconds = 0, 0.0
    for lane in lanes:
        rate, count = lane.metrics.get("tokens_per_s"), lane.metrics.get("num_tokens")
        if not rate or not count:
            return None
        tokens, seconds = tokens + count, seconds + count / rate
    return tokens / seconds


def _turns_mark(turns: int) -> str:
    """Before a conversation's first prompt in the listing: how many turns it has."""
    return f"[{turns} turns] " if turns > 1 else ""


def _cell(text: str) -> Text:
    """A table cell of data: never markup, no control characters."""
    return Text(visible(text))


def _fmt(value: Any, pattern: str = "{}") -> str:
    return "-" if value is None else pattern.format(value)


WIDE = 120
"""Below this many columns the listing leaves out models and settings (`--json` has everything)."""

COLUMNS_KEY = (
    "acceptance: draft acceptance rate, τ = mean acceptance length (tokens a round commits)",
    "speedup: the speculative lane's tokens/s over the target-only lane's (busy: the machine's speed moved "
    "while it measured)",
    "vs target: how alike the speculative lane's tokens are to the target-only lane's, 1 − edit distance / "
    "the longer one's length (100%: the same tokens; -: no target-only lane)",
)
"""Under the listing: what its columns of numbers are (docs/sessions.md says the same)."""


def list_sessions(args: argparse.Namespace) -> int:
    directory = sessions_dir_from(given(args))
    console = make_console()
    paths = list_session_files(directory)
    if args.ids:
        print("\n".join(path.stem for path in paths))
        return 0
    wide = console.width >= WIDE
    headers = ["id", "prompt", *(["models", "settings"] if wide else []), "acceptance", "speedup", "vs target", ""]
    rows: list[list[str]] = []
    for path in paths:
        try:
            row = summarize(load_session(path))
        except SessionError as error:
            if args.json:
                print(dump_json({"id": path.stem, "error": str(error)}))
            else:
                rows.append([path.stem, error_line(error), *[""] * (len(headers) - 3), "unreadable"])
            continue
        if args.json:
            print(dump_json(row, ensure_ascii=False))
            continue
        chosen_by = f" ({row['route_chosen_by']})" if row["route_chosen_by"] else ""
        if row["route_deferred"]:  # the learned router was unsure, or is not followed at all: --json says why
            chosen_by = " (heuristic: the learned router deferred)"
        models = row["target"] + (f" + {row['route']}{chosen_by}" if row["route"] else "")
        settings = f"{row['mode']} T={_fmt(row['temperature'], '{:g}')}"
        if row["mode"] == "speculative":
            tree = f" width={row['width']} nodes={row['tree_nodes']}" if row["width"] > 1 else ""
            settings += f" k={row['k']} {row['policy']}{tree} {row['rule']}"
        rows.append(
            [
                row["id"],
                _turns_mark(row["turns"]) + " ".join(row["prompt"].split()),
                *([models, settings] if wide else []),
                f"{_fmt(row['draft_acceptance_rate'], '{:.0%}')} τ={_fmt(row['mean_acceptance_length'], '{:.2f}')}",
                _fmt(row["speedup"], "{:.2f}x") + (" busy" if row["disturbed_reason"] else ""),
                _fmt(row["similarity_to_target"], "{:.0%}"),
                "" if row["complete"] else "incomplete",
            ]
        )
    if args.json:
        return 0
    if not rows:
        console.print(f"no sessions in {directory}; save one with `specplay run --save`")
        return 0
    # One line a session, the id first and whole (diff, export and --open take it); the prompt
    # gets the width the other columns leave, cut short.
    cells = [[visible(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    room = max(8, console.width - (sum(widths) - widths[1]) - 2 * (len(headers) - 1))
    widths[1] = min(widths[1], room)
    for number, row in enumerate(cells):
        prompt = row[1] if len(row[1]) <= room else row[1][: room - 1] + "…"
        line = "  ".join(cell.ljust(width) for cell, width in zip([row[0], prompt, *row[2:]], widths, strict=True))
        console.print(Text(line.rstrip(), style="bold" if number == 0 else ""))
    for note in COLUMNS_KEY:
        console.print(Text(note, style="dim"), soft_wrap=False)  # wrapped at the width, unlike the rows
    return 0
