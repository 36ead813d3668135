"""`specplay fidelity`: what did I give up for the speed?

Samples target-only, draft-only and speculative decoding under each acceptance rule at several
values of its knob (the TV budget, typical acceptance's epsilon, lenience, the cascade's alpha)
with the same seeds, scores every output under the target, and prints, saves and plots the
comparison.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from specplay import __version__
from specplay.backends import blas_warning, open_stream, thread_cleanup
from specplay.cli.configure import comma_floats, given, pairs, replay_base, run_config, sessions_dir_from
from specplay.cli.flags import (
    add_backend_flags,
    add_decoding_flags,
    add_model_flags,
    add_prompt_flags,
    add_sessions_dir_flag,
)
from specplay.cli.render import make_console, warn
from specplay.config.capabilities import capabilities_of
from specplay.config.model_sets import models_named
from specplay.config.run_config import RunConfig, check
from specplay.display.text import token_repr
from specplay.drafters import cannot_write
from specplay.engine.capabilities import check_supported
from specplay.engine.routers.routing import resolve_route
from specplay.engine.rules import RULE_NAMES, RULES, AcceptanceRule, Mentored
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError
from specplay.fidelity.cells import row_cells
from specplay.fidelity.conversation import FidelityTurn, compared, session_turns, turn_record
from specplay.fidelity.measure import (
    DEFAULT_BUDGETS,
    DEFAULT_KNOBS,
    FidelityReport,
    check_budgets,
    check_writable,
    engine_generator,
    measure_fidelity,
    report_path,
    sweep_rules,
    write_report,
)
from specplay.files.json_text import dump_json
from specplay.files.outputs import write_output
from specplay.review.fidelity_page import conversation_review, sweep_review
from specplay.review.html import to_html
from specplay.runner.thread import ModelThread
from specplay.store import Session, find_session, load_session
from specplay.store.writer import round_token_ids


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fidelity",
        help="measure what speculative decoding with a relaxed acceptance rule gives up for its speed",
        description="Sample target-only, draft-only and speculative decoding under each rule at each value of "
        "its knob with the same seeds; score every output under the target (temperature 1) and compare.",
    )
    add_model_flags(parser)
    add_backend_flags(parser)
    add_prompt_flags(parser)
    add_decoding_flags(parser, rule_list=True)
    output = parser.add_argument_group("fidelity")
    output.add_argument(
        "--budgets",
        default=",".join(f"{b:g}" for b in DEFAULT_BUDGETS),
        metavar="D,D,...",
        help="mentored decoding's TV budgets, one speculative row each (default: %(default)s)",
    )
    output.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="RULE=V,V,...",
        help="the knob values of another rule given to --rule (typical: epsilon, lenience: lambda, cascade: alpha); "
        "defaults: "
        + "; ".join(
            f"{name} {','.join(f'{v:g}' for v in values)}"
            for name, values in DEFAULT_KNOBS.items()
            if name != Mentored.name
        ),
    )
    output.add_argument("--samples", type=int, default=8, metavar="N", help="samples per row, seeds S..S+N-1")
    output.add_argument("--max-tokens", type=int, default=64)
    output.add_argument("--json", action="store_true", help="print the report as one JSON object")
    output.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="where the plot goes (default: beside the report)"
    )
    sessions = parser.add_argument_group("sessions")
    sessions.add_argument(
        "--session",
        metavar="SESSION",
        help="sample each turn of a saved conversation (or one prompt) instead of --prompt: every row of turn i "
        "after the session's speculative lane's earlier turns, its prompts and its own answers; the session's "
        "models and settings unless flags change them",
    )
    add_sessions_dir_flag(sessions)
    parser.set_defaults(command=fidelity)


def parse_budgets(text: str) -> list[float]:
    return check_budgets(comma_floats(text, "budgets", "TV budgets in [0, 1]"))


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
TEMPERATURE = 1.0
"""Fidelity is about sampled text: greedy would hide the spread."""


def parse_rules(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(RULE_NAMES)
    for name in names:
        if name not in RULES:
            raise ConfigError(
                "rule", f"takes rules from {', '.join(RULE_NAMES)} (or all), separated by commas (got {name!r})"
            )
    if not names:
        raise ConfigError("rule", f"takes rules from {', '.join(RULE_NAMES)} (or all), separated by commas")
    return list(dict.fromkeys(names))


def swept_flag(name: str) -> str:
    """Where a sweep takes a rule's knob values: --budgets, the TV budgets of its first reports, or --sweep."""
    return "--budgets" if name == Mentored.name else f"--sweep {name}="


def sweep_knobs(rules: list[str], budgets: list[float], sweeps: list[str]) -> dict[str, list[float]]:
    """Each rule's knob values: --budgets for mentored decoding, --sweep RULE=V,... or the defaults for the others."""
    given_values: dict[str, list[float]] = {}
    for name, values in pairs(sweeps, "sweep", "RULE=V,V,..."):
        if name == Mentored.name:
            raise ConfigError("sweep", "gives mentored decoding's values with --budgets")
        if name not in rules:
            raise ConfigError("sweep", f"names {name!r}, which --rule does not list")
        given_values[name] = comma_floats(values, "sweep", f"{name}'s knob values")
    return {
        name: budgets if name == Mentored.name else given_values.get(name, list(DEFAULT_KNOBS[name])) for name in rules
    }


# A single knob value does not apply: each row has its own.
_SWEPT_FLAGS = {rule.knob.setting.field: swept_flag(name) for name, rule in RULES.items()}


def configure(args: argparse.Namespace) -> tuple[RunConfig, list[AcceptanceRule], Session | None]:
    """Everything that can be checked without models, checked before loading them; the session
    whose conversation is sampled, with --session."""
    flags = given(args)
    session, base = None, None
    if "session" in flags:
        if "prompt" in flags or "prompt_file" in flags:
            raise ConfigError("session", "takes the prompts from the session; give --session or --prompt, not both")
        session = load_session(find_session(flags.pop("session"), sessions_dir_from(flags)))
        base = replay_base(session, flags)
    if flags.get("mode", "speculative") != "speculative":
        raise ConfigError("mode", "does not apply: fidelity runs target-only, draft-only and speculative rows")
    if flags.get(Mentored.knob.setting.field, 0) != 0:
        knob = Mentored.knob.setting
        raise ConfigError(knob.field, "does not apply: give the TV budgets with --budgets", flag=knob.flag)
    for flag, instead in _SWEPT_FLAGS.items():
        if flag in flags:
            raise ConfigError(flag, f"does not apply: each row has its own value (give them with {instead})")
    names = parse_rules(flags.pop("rule", Mentored.name))
    budgets = parse_budgets(args.budgets)
    config = run_config({"temperature": TEMPERATURE} | flags, base)
    rules = sweep_rules(sweep_knobs(names, budgets, args.sweep), config.settings.rule_params)
    for name in names:
        check_supported(replace(config.settings, rule=name), capabilities_of(config))
    if config.native:
        raise ConfigError("vllm_native", "fixes k and the acceptance rule on the server; fidelity varies the TV budget")
    if config.request.prompt is None:
        raise ConfigError("prompt", "or --prompt-file is required (or --session SESSION)")
    if not config.drafter_names:
        raise ConfigError("draft", "is needed: fidelity compares a drafter's speculation with the target")
    check(config)
    if args.samples < 1:
        raise ConfigError("samples", f"must be at least 1 (got {args.samples})")
    if args.plot is not None and not args.plot.is_dir():
        if args.plot.suffix.lower() not in PLOT_SUFFIXES:
            raise ConfigError("plot", f"{str(args.plot)!r} must end in {', '.join(PLOT_SUFFIXES)} (or name a folder)")
        if not args.plot.parent.is_dir():
            raise ConfigError("plot", f"goes to a folder that does not exist ({str(args.plot.parent)!r})")
    return config, rules, session


def _recorded_settings(config: RunConfig, rules: list[AcceptanceRule]) -> dict[str, object]:
    """The report's settings: each speculative row has its own rule and knob, left out (None) here."""
    settings = asdict(config.settings)
    swept = {rule.knob.setting.field for rule in rules}
    params = {name: None if name in swept else value for name, value in settings["rule_params"].items()}
    return settings | {"rule": None, "rule_params": params}


@dataclass(frozen=True)
class Sampled:
    """What a sweep measured, on the model thread."""

    turns: list[tuple[FidelityTurn, tuple[int, ...], FidelityReport]]
    """Each turn, the prompt tokens it was sampled after, and its rows."""
    identity: dict[str, Any]
    route_map: dict[str, str]
    texts: dict[int, str]
    speed_measured: bool


def fidelity(args: argparse.Namespace) -> int:
    config, rules, session = configure(args)
    check_writable(config.sessions_dir)
    if message := blas_warning(config):
        warn(message)
    request_config = config.request
    assert request_config.prompt is not None
    turns = (
        session_turns(session)
        if session is not None
        else [FidelityTurn(0, request_config.prompt, (), "speculative", None)]
    )
    sampled = _sample(config, rules, turns, range(request_config.seed, request_config.seed + args.samples))
    now = datetime.now(UTC)
    first, token_ids, report = sampled.turns[0]
    about = {
        "specplay_version": __version__,
        "created": now.isoformat(timespec="seconds"),
        "prompt": first.prompt,
        "prompt_token_ids": list(token_ids),
        "raw": request_config.raw,
        "prompt_format": request_config.prompt_format,
        "max_tokens": request_config.max_tokens,
        # Each speculative row has its own rule and knob.
        "settings": _recorded_settings(config, rules),
        "route_map": sampled.route_map,
        "backend": sampled.identity,
    }
    measured = [(turn, turn_report) for turn, _, turn_report in sampled.turns]
    speed_measured = sampled.speed_measured
    if session is None:
        content = about | report.to_dict()
        review = sweep_review(report, about, sampled.texts, speed_measured)
    else:
        about |= {"session": session.id, "compared": compared(session, turns)}
        content = about | {"turns": [turn_record(t, len(session.turns), ids, r) for t, ids, r in sampled.turns]}
        review = conversation_review(measured, len(session.turns), about, sampled.texts, speed_measured)
    saved = write_report(content, report_path(config.sessions_dir, now))
    plots = _plots(args.plot, saved, measured, conversation=session is not None)
    page = write_output(
        saved.with_suffix(".html"),
        to_html(review),
        fix="choose another folder with --sessions-dir or SPECPLAY_SESSIONS_DIR",
    )
    if args.json:
        shown = {"plot": str(plots[0])} if session is None else {"plots": [str(plot) for plot in plots]}
        print(dump_json(content | {"report": str(saved)} | shown | {"page": str(page)}, ensure_ascii=False))
        return 0
    console = make_console()
    console.print(Text(f"models: {models_named(config)}"), style="dim")
    if session is not None:
        console.print(Text(about["compared"]), style="dim")
    for turn, turn_report in measured:
        if session is not None:
            heading = f"\nTurn {turn.index + 1} of {len(session.turns)} · {token_repr(turn.prompt, 60)}"
            console.print(Text(heading), style="bold")
        last = turn is measured[-1][0]  # the headers spelt out once, under the last table
        console.print(fidelity_table(turn_report, speed_measured=speed_measured, caption=last))
        if len(turn_report.rules) > 1:
            matched = ", ".join(f"{r.label} ({r.mean_acceptance_length:.2f})" for r in turn_report.matched())
            console.print(f"matched acceptance (mean acceptance length): {matched}", style="dim")
    shown_plots = "\n".join(f"plot {plot}" for plot in plots)
    console.print(f"saved {saved}\n{shown_plots}\nreview page {page}", style="dim")
    return 0


def _sample(config: RunConfig, rules: list[AcceptanceRule], turns: list[FidelityTurn], seeds: range) -> Sampled:
    """Every row of every turn with every seed, on a model thread of its own."""
    request_config = config.request
    thread = ModelThread(on_exit=thread_cleanup(config))
    try:
        stream = thread.call(lambda: open_stream(config))
        if not stream.capabilities.scoring:
            raise ConfigError("backend", "cannot score text under the target here; fidelity needs a backend that can")
        identity = thread.call(stream.describe)
        measured = []
        with _progress() as on_sample:
            for turn in turns:
                token_ids = tuple(stream.encode(turn.prompt, request_config.raw, turn.earlier))
                progress = _turn_progress(on_sample, turn.index, len(turns))
                report = _measure_turn(
                    thread, stream, config, rules, turn=turn, token_ids=token_ids, seeds=seeds, on_sample=progress
                )
                measured.append((turn, token_ids, report))
        # Drafted tokens' texts for the review page, where the tokenizer is local (never a server's).
        reports = [report for _, _, report in measured]
        texts = thread.call(lambda: _drafted_texts(stream, reports)) if stream.capabilities.local_token_text else {}
        thread.call(stream.close)
    finally:
        thread.close()
    return Sampled(measured, identity, dict(stream.routing.route_map), texts, stream.capabilities.wall_time_is_speed)


def _turn_progress(
    on_sample: Callable[[int, int], None] | None, turn: int, turns: int
) -> Callable[[int, int], None] | None:
    """A turn's progress as part of the whole sweep's."""
    if on_sample is None:
        return None
    return lambda done, total: on_sample(turn * total + done, turns * total)


def _measure_turn(
    thread: ModelThread,
    stream: EventStream,
    config: RunConfig,
    rules: list[AcceptanceRule],
    turn: FidelityTurn,
    token_ids: tuple[int, ...],
    seeds: range,
    on_sample: Callable[[int, int], None] | None,
) -> FidelityReport:
    """Every row of one turn, each seed sampled after the turn's conversation and scored after it."""
    generate = engine_generator(stream, turn.prompt, token_ids, config.settings, config.request.max_tokens)
    route = resolve_route(config.settings.route, stream.routing.choice(turn.prompt).drafter)
    draft_row = cannot_write(route, config.drafters) is None  # a draft-only row where the drafter writes alone
    return measure_fidelity(
        # Both run on the model thread, which owns every MLX array (a vLLM backend scores
        # through the target server's prompt_logprobs).
        lambda mode, rule, seed: thread.call(lambda: generate(mode, rule, seed)),
        lambda ids: thread.call(lambda: stream.score(token_ids, ids)),
        rules=rules,
        seeds=seeds,
        on_sample=on_sample,
        draft_row=draft_row,
    )


def _plots(
    chosen: Path | None, saved: Path, measured: list[tuple[FidelityTurn, FidelityReport]], conversation: bool
) -> list[Path]:
    """The plot beside the report (or where --plot says); a conversation's, one per turn, named after it."""
    from specplay.fidelity.plot import plot_fidelity

    path = saved.with_suffix(".png")
    if chosen is not None:  # a folder takes the plot under the report's name
        path = chosen / path.name if chosen.is_dir() else chosen
    if not conversation:
        return [plot_fidelity(measured[0][1], path)]
    return [
        plot_fidelity(report, path.with_name(f"{path.stem}-turn-{turn.index + 1}{path.suffix}"))
        for turn, report in measured
    ]


def _drafted_texts(stream: EventStream, reports: list[FidelityReport]) -> dict[int, str]:
    """The text of every drafted and candidate token of the runs a review page shows."""
    ids = {
        token_id
        for report in reports
        for by_row in report.lanes.values()
        for lane in by_row.values()
        for event in lane.rounds
        for token_id in round_token_ids(event)
    }
    return {token_id: stream.token_text(token_id) for token_id in sorted(ids)}


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr when it is a terminal; otherwise nothing."""
    console = make_console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("sampling", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


# Short headers keep the table within 80 columns; the caption spells them out.
_HEADERS = (
    "acc.\nrate",
    "acc.\nlen",
    "tok/s",
    "log-lik\n± s.e.",
    "dist\n1",
    "dist\n2",
    "mean\nlen",
    "sim.",
    "TV\n/tok",
)
_CAPTION = (
    "acc. rate, len: draft acceptance rate, mean acceptance length\n"
    "tok/s: median over samples · mean len: tokens per sample\n"
    "log-lik: per token under the target (temperature 1), ± 1 standard error\n"
    "dist 1, 2: distinct-1, distinct-2 · TV/tok: TV spent per token\n"
    "sim.: mean normalized Levenshtein similarity to the target-only samples; *: the target-only\n"
    "samples to each other, the spread of the target alone (near 0 where sampled texts part at once)"
)


_REMOTE_CAPTION = "\ntok/s of speculative rows through vLLM: not shown, it would time HTTP round trips"


def fidelity_table(report: FidelityReport, speed_measured: bool = True, caption: bool = True) -> Table:
    """`caption`: spell out the headers under the table (a conversation's last turn's table only)."""
    table = Table(
        title=f"fidelity · drafter {report.route} · {len(report.seeds)} samples per row",
        caption=(_CAPTION + ("" if speed_measured else _REMOTE_CAPTION)) if caption else None,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("row", no_wrap=True)
    for header in _HEADERS:
        table.add_column(header, justify="right", no_wrap=True)
    for row in report.rows:
        table.add_row(*row_cells(row, speed_measured))
    return table
