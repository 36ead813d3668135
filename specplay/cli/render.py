"""Terminal and JSON output of a run, built from the engine's events."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.text import Text

from specplay.display.source_styles import SOURCE_STYLES
from specplay.display.text import counted, one_line, visible
from specplay.engine.disturbance import speedup_disturbance
from specplay.engine.events import Token
from specplay.engine.routers.routing import RouteChoice
from specplay.engine.settings import ADAPTIVE_ROUTE, NONE_ROUTE, SpecSettings
from specplay.engine.speedup import loss_reason, measured_speedup, round_account, who_drafted
from specplay.files.json_text import dump_json
from specplay.store import LaneRecord
from specplay.store.codec import filed


def to_json(record: LaneRecord) -> dict[str, Any]:
    """A finished lane as `specplay run --json` prints it (other tools rely on these names)."""
    assert record.start is not None and record.done is not None
    return {
        "mode": record.start.mode,
        "route": record.start.drafter,
        "seed": record.start.seed,
        "settings": asdict(record.start.settings),
        "prompt_token_ids": list(record.start.prompt_token_ids),
        "token_ids": list(record.done.token_ids),
        "text": record.done.text,
        "sources": record.sources,
        "finish_reason": record.done.finish_reason,
        "rounds": [
            {
                "route": r.drafter,
                "nodes": r.nodes,
                "depth": r.depth,
                "k_asked": r.k_asked,
                "drafted": list(r.drafted),
                "parents": list(r.parents),
                "num_accepted": r.num_accepted,
                "token_index": r.token_index,
                "tokens": [t.token_id for t in r.tokens],
                "sources": [t.source for t in r.tokens],
                "positions": [asdict(p) for p in r.positions],
                "draft_ms": r.draft_ms,
                "verify_ms": r.verify_ms,
                "overhead_ms": r.overhead_ms,
                "catch_up_ms": r.catch_up_ms,
                "catch_up_tokens": r.catch_up_tokens,
                "counterfactuals": [filed(asdict(c)) for c in r.counterfactuals],
                "origin": r.origin,
            }
            for r in record.rounds
        ],
        "control_changes": [
            {"token_index": c.token_index, "changes": [list(change) for change in c.changes]} for c in record.changes
        ],
        "metrics": record.done.metrics,
        # Counterfactual routes, at the top level for the tools that read them (also in metrics).
        "counterfactual": record.done.metrics.get("counterfactual"),
        "route_regret": record.done.metrics.get("route_regret"),
    }


def json_line(
    record: LaneRecord,
    baseline: LaneRecord | None = None,
    session: str | None = None,
    route: RouteChoice | None = None,
    models: str | None = None,
) -> str:
    """`run --json`'s line for one prompt: the lane, where it was saved, the target-only lane's
    tokens and metrics, where `--route auto` sent the request and which router chose, and the
    models run (`models`, in words: model_sets.models_named)."""
    return dump_json(run_json(record, baseline, route, session, models), ensure_ascii=False)


def conversation_line(turns: Sequence[Mapping[str, Any]], session: str | None = None, models: str | None = None) -> str:
    """`run --json`'s line for a conversation: `turns`, each turn's `run_json` object (its
    `prompt` first), where the conversation was saved, and the models run."""
    out: dict[str, Any] = {"turns": list(turns)}
    if models is not None:
        out["models"] = models
    if session:
        out["session"] = session
    return dump_json(out, ensure_ascii=False)


def run_json(
    record: LaneRecord,
    baseline: LaneRecord | None = None,
    route: RouteChoice | None = None,
    session: str | None = None,
    models: str | None = None,
) -> dict[str, Any]:
    """One prompt's answer as `run --json` reports it (`json_line`)."""
    out = to_json(record)
    if models is not None:
        out["models"] = models
    if session:
        out["session"] = session
    if route is not None:
        out["route_choice"] = route.record()
    if baseline is not None and baseline.done is not None:
        out["baseline"] = {"token_ids": list(baseline.done.token_ids), "metrics": baseline.done.metrics}
        # As `specplay costs --json` names it: whether the machine's speed moved while measuring.
        reason = speedup_disturbance(record.metrics, baseline.done.metrics)
        out["disturbed"], out["disturbed_reason"] = reason is not None, reason
    if (report := vllm_report(record.metrics)) is not None:
        out["vllm"] = report
    return out


def vllm_report(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """What vLLM servers said of the run: inspection mode's account (tokens per target call, the
    modelled speedup, exactness), or, in native mode, the server's own."""
    if "vllm" in metrics:
        from specplay.backends.vllm.report import inspection_report

        return inspection_report(metrics)
    return metrics.get("server")


PLAIN_MARKS = {"relaxed": ("«", "»"), "corrected": ("⟦", "⟧"), "bonus": ("⦃", "⦄")}
"""Where output has no colour (a pipe, a file, NO_COLOR), the sources other than `accepted` are
marked around their tokens with brackets that program text rarely holds."""


def colourless(console: Console) -> bool:
    return console.color_system is None


def legend(marks: bool = False) -> Text:
    """The sources and their colours, or, with `marks`, the brackets that stand for them."""
    text = Text("sources: ")
    for source in ("accepted", "relaxed", "corrected", "bonus"):
        if marks:
            opening, closing = PLAIN_MARKS.get(source, ("", ""))
            text.append(f"{source} {opening}x{closing}" if opening else f"{source} plain").append("  ")
        else:
            text.append(source, style=SOURCE_STYLES[source]).append(" ")
    return text


def token_text(token: Token, marks: bool = False) -> Text:
    text = visible(token.text)
    if marks and token.source in PLAIN_MARKS:
        opening, closing = PLAIN_MARKS[token.source]
        text = f"{opening}{text}{closing}"
    return Text(text, style=SOURCE_STYLES[token.source])


def tree_shape(settings: SpecSettings) -> str:
    """A draft tree's shape as asked ("tree width 2, 8 nodes at most"; k is then its depth)."""
    nodes = settings.tree_nodes or settings.width * settings.k
    return f"tree width {settings.width}, {nodes} nodes at most"


def summary(record: LaneRecord, baseline: LaneRecord | None, speed_measured: bool) -> str:
    """The stats line after a run's text. `speed_measured`: wall time is a speed (not HTTP round
    trips), so the speedup over the baseline lane is given."""
    assert record.start is not None and record.done is not None
    m, s = record.done.metrics, record.start.settings
    server = m.get("server")
    parts = [record.start.mode]
    if record.start.drafter is not None and s.route != ADAPTIVE_ROUTE:
        parts.append(f"route {record.start.drafter}")
    if server is not None:
        parts.append(f"k {server['k'] if server['k'] is not None else '?'} (server)")
    elif record.start.mode == "speculative" and record.start.drafter == NONE_ROUTE and s.route != ADAPTIVE_ROUTE:
        parts.append("no speculation")  # k, policy and rule judge nothing: every round drafts none
    elif record.start.mode == "speculative":
        parts += [f"k {s.k} {s.policy}", *([tree_shape(s)] if s.width > 1 else []), s.acceptance_rule.named()]
    parts += [f"temperature {s.sampling.temperature:g}", f"seed {record.start.seed}", counted(m["num_tokens"], "token")]
    if m["tokens_per_s"] is not None:
        parts.append(f"{m['tokens_per_s']:.1f} tokens/s")
    if m["num_spec_steps"]:
        parts.append(f"mean acceptance length {m['mean_acceptance_length']:.2f}")
        if m["draft_acceptance_rate"] is not None:  # None when no round drafted (prompt lookup found nothing)
            parts.append(f"draft acceptance rate {100 * m['draft_acceptance_rate']:.1f}%")
        parts.append(counted(m["num_spec_steps"], "round"))
        if m["tv_spent"]:
            parts.append(f"TV spent {m['tv_spent']:.2f}")
        if m.get("second_branch_share") is not None:  # sessions older than the field lack it
            parts.append(width_line(m))
        if s.route == ADAPTIVE_ROUTE or m.get("route_switches"):
            parts.append(routes_line(m))
        if m.get("counterfactual"):
            parts.append(counterfactual_line(m))
    if server is not None:
        exact = "colours exact (per-step metrics)" if server["sources_exact"] else "colours approximate (chunk sizes)"
        parts.append(exact)
        if server["counters_contaminated"]:
            parts.append("server counters include other requests")
    parts.append(record.done.finish_reason)
    if speed_measured and baseline is not None and baseline.done is not None:
        target_tps = baseline.done.metrics["tokens_per_s"]
        if (speedup := measured_speedup(m["tokens_per_s"], target_tps)) is not None:
            parts.append(f"target-only {target_tps:.1f} tokens/s, speedup {speedup:.2f}x")
            if (busy := speedup_disturbance(m, baseline.done.metrics)) is not None:
                parts.append(f"disturbed: {busy}; run again on a quieter machine")
            if speedup < 1 and (loss := run_loss(record, baseline.done.metrics.get("mean_step_ms"))) is not None:
                parts.append(loss)
    return " · ".join(parts)


def run_loss(record: LaneRecord, target_step_ms: float | None) -> str | None:
    """Why a speculative run was slower than target-only, as the playground's cost line says it:
    the round account's term that lost (`speedup.loss_reason`), named for the drafters that
    drafted (`speedup.who_drafted`)."""
    assert record.start is not None and record.done is not None
    m = record.done.metrics
    if record.start.mode != "speculative" or (account := round_account(m, target_step_ms)) is None:
        return None
    drafted_by: dict[str, int] = {}
    for event in record.rounds:
        drafted_by[event.drafter] = drafted_by.get(event.drafter, 0) + event.nodes
    last = record.rounds[-1].drafter if record.rounds else record.start.drafter
    drafts_per_round = m["num_draft_tokens"] / m["num_spec_steps"] if m["num_spec_steps"] else None
    loss = loss_reason(account, who_drafted(drafted_by, last), drafts_per_round, m["draft_acceptance_rate"])
    return None if loss is None else loss.sentence


def width_line(metrics: dict[str, Any]) -> str:
    """Where the target's token stood among the drafter's at rejections (engine/correction_rank.py)."""
    ranks = " ".join(f"{rank}:{count}" for rank, count in metrics["rejection_rank_histogram"].items())
    return f"rejection ranks {ranks}; a second branch saves {100 * metrics['second_branch_share']:.0f}%"


def routes_line(metrics: dict[str, Any]) -> str:
    """Which drafters served the rounds and how well, and what switching cost."""
    served = sorted(metrics["rounds_by_route"].items(), key=lambda item: -item[1]["rounds"])
    rounds = ", ".join(f"{name} {entry['rounds']} ({entry['mean_acceptance_length']:.2f})" for name, entry in served)
    switches = metrics["route_switches"]
    catch_up = f", catch-up {metrics['catch_up_ms']:.1f} ms" if metrics["catch_up_ms"] else ""
    return f"rounds by drafter (mean acceptance length): {rounds}; {switches} switches{catch_up}"


def counterfactual_line(metrics: dict[str, Any]) -> str:
    """Each drafter's mean acceptance length on this text, best first, and the route regret."""
    ranked = sorted(metrics["counterfactual"].items(), key=lambda item: -item[1]["mean_acceptance_length"])
    lengths = ", ".join(f"{name} {entry['mean_acceptance_length']:.2f}" for name, entry in ranked)
    return f"counterfactual mean acceptance length: {lengths}; route regret {metrics['route_regret']:.2f}"


class TerminalConsole(Console):
    """A console that never reads data as markup and shows every string through `visible`:
    prompts, paths, session ids and model text can hold "[/bold]" or control bytes."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().print(*(visible(o) if isinstance(o, str) else o for o in objects), **kwargs)

    def on_broken_pipe(self) -> None:
        """Rich would exit 1 here; the command line's edge ends every command's closed pipe alike."""
        raise BrokenPipeError(errno.EPIPE, "the reader of the output left")


DEFAULT_SIZE = (80, 25)
MAX_SIZE = 10_000
"""Columns or lines beyond any screen: a larger COLUMNS or LINES is a mistake, and is capped."""


def screen_size(environ: Mapping[str, str], terminal: tuple[int, int] | None) -> tuple[int, int]:
    """Columns and lines to print for: COLUMNS and LINES where each is a whole number from 1 up,
    else the terminal's own, else 80 x 25. Rich reads COLUMNS=0 as a width of 0 (and prints
    nothing at all) and fails on a digit int() refuses, so the console never reads them itself."""
    measured = terminal or DEFAULT_SIZE
    return (
        _dimension(environ.get("COLUMNS"), measured[0] or DEFAULT_SIZE[0]),
        _dimension(environ.get("LINES"), measured[1] or DEFAULT_SIZE[1]),
    )


def _dimension(value: str | None, fallback: int) -> int:
    try:
        number = int(value) if value is not None else 0
    except ValueError:  # junk, or more digits than int() converts
        number = 0
    return min(number if number >= 1 else fallback, MAX_SIZE)


def terminal_size() -> tuple[int, int] | None:
    """The size of the first of stdin, stdout and stderr that is a terminal (as Rich measures)."""
    for descriptor in (0, 1, 2):
        try:
            size = os.get_terminal_size(descriptor)
        except (OSError, ValueError):  # not a terminal, or closed
            continue
        return size.columns, size.lines
    return None


def make_console(stderr: bool = False) -> Console:
    """Every console of the command line: its size is given (see `screen_size`), never read by Rich."""
    width, height = screen_size(os.environ, terminal_size())
    return TerminalConsole(highlight=False, soft_wrap=True, markup=False, stderr=stderr, width=width, height=height)


def warn(message: str) -> None:
    print(f"specplay: warning: {one_line(message)}", file=sys.stderr)


def inform(message: str) -> None:
    """One line on stderr that is no warning (what a drafter read as the command started)."""
    print(f"specplay: {one_line(message)}", file=sys.stderr)
