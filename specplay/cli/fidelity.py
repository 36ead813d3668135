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
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from rich import box
from rich.progress import Progress
from rich.table import Table

from specplay import __version__
from specplay.backends import blas_warning, open_stream, thread_cleanup
from specplay.cli.configure import comma_floats, given, pairs, run_config
from specplay.cli.flags import (
    add_backend_flags,
    add_decoding_flags,
    add_model_flags,
    add_prompt_flags,
    add_sessions_dir_flag,
)
from specplay.cli.render import make_console, warn
from specplay.config.capabilities import capabilities_of
from specplay.config.run_config import RunConfig, check
from specplay.drafters import cannot_write
from specplay.engine.capabilities import check_supported
from specplay.engine.routers.routing import resolve_route
from specplay.engine.rules import RULE_NAMES, RULES, AcceptanceRule, Mentored
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError
from specplay.fidelity.cells import row_cells
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
from specplay.review.fidelity_page import sweep_review
from specplay.review.html import to_html
from specplay.runner.thread import ModelThread
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
    add_sessions_dir_flag(parser.add_argument_group("sessions"))
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


def configure(args: argparse.Namespace) -> tuple[RunConfig, list[AcceptanceRule]]:
    """Everything that can be checked without models, checked before loading them."""
    flags = given(args)
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
    config = run_config({"temperature": TEMPERATURE} | flags)
    rules = sweep_rules(sweep_knobs(names, budgets, args.sweep), config.settings.rule_params)
    for name in names:
        check_supported(replace(config.settings, rule=name), capabilities_of(config))
    if config.native:
        raise ConfigError("vllm_native", "fixes k and the acceptance rule on the server; fidelity varies the TV budget")
    if config.request.prompt is None:
        raise ConfigError("prompt", "or --prompt-file is required")
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
    return config, rules


def _recorded_settings(config: RunConfig, rules: list[AcceptanceRule]) -> dict[str, object]:
    """The report's settings: each speculative row has its own rule and knob, left out (None) here."""
    settings = asdict(config.settings)
    swept = {rule.knob.setting.field for rule in rules}
    params = {name: None if name in swept else value for name, value in settings["rule_params"].items()}
    return settings | {"rule": None, "rule_params": params}


def fidelity(args: argparse.Namespace) -> int:
    config, rules = configure(args)
    directory = config.sessions_dir
    check_writable(directory)
    if message := blas_warning(config):
        warn(message)
    thread = ModelThread(on_exit=thread_cleanup(config))
    try:
        source = thread.call(lambda: open_stream(config))
        if not source.capabilities.scoring:
            raise ConfigError("backend", "cannot score text under the target here; fidelity needs a backend that can")
        identity = thread.call(source.describe)
        spec = config.request
        assert spec.prompt is not None
        token_ids = tuple(source.encode(spec.prompt, raw=spec.raw))
        generate = engine_generator(source, spec.prompt, token_ids, config.settings, spec.max_tokens)
        route = resolve_route(config.settings.route, source.routing.choice(spec.prompt).drafter)
        draft_row = cannot_write(route, config.drafters) is None  # a draft-only row where the drafter writes alone
        seeds = range(spec.seed, spec.seed + args.samples)
        with _progress() as on_sample:
            report = measure_fidelity(
                # Both run on the model thread, which owns every MLX array (a vLLM backend scores
                # through the target server's prompt_logprobs).
                lambda mode, rule, seed: thread.call(lambda: generate(mode, rule, seed)),
                lambda ids: thread.call(lambda: source.score(token_ids, ids)),
                rules=rules,
                seeds=seeds,
                on_sample=on_sample,
                draft_row=draft_row,
            )
        # Drafted tokens' texts for the review page, where the tokenizer is local (never a server's).
        texts = thread.call(lambda: _drafted_texts(source, report)) if source.capabilities.local_token_text else {}
        thread.call(source.close)
    finally:
        thread.close()

    now = datetime.now(UTC)
    about = {
        "specplay_version": __version__,
        "created": now.isoformat(timespec="seconds"),
        "prompt": spec.prompt,
        "prompt_token_ids": list(token_ids),
        "raw": spec.raw,
        "prompt_format": spec.prompt_format,
        "max_tokens": spec.max_tokens,
        # Each speculative row has its own rule and knob.
        "settings": _recorded_settings(config, rules),
        "route_map": source.routing.route_map,
        "backend": identity,
    }
    content = about | report.to_dict()
    saved = write_report(content, report_path(directory, now))
    from specplay.fidelity.plot import plot_fidelity

    plot_path = saved.with_suffix(".png")
    if args.plot is not None:  # a folder takes the plot under the report's name
        plot_path = args.plot / plot_path.name if args.plot.is_dir() else args.plot
    plot = plot_fidelity(report, plot_path)
    speed_measured = source.capabilities.wall_time_is_speed
    page = write_output(
        saved.with_suffix(".html"),
        to_html(sweep_review(report, about, texts, speed_measured)),
        fix="choose another folder with --sessions-dir or SPECPLAY_SESSIONS_DIR",
    )
    if args.json:
        print(dump_json(content | {"report": str(saved), "plot": str(plot), "page": str(page)}, ensure_ascii=False))
    else:
        console = make_console()
        console.print(fidelity_table(report, speed_measured=speed_measured))
        if len(report.rules) > 1:
            matched = ", ".join(f"{r.label} ({r.mean_acceptance_length:.2f})" for r in report.matched())
            console.print(f"matched acceptance (mean acceptance length): {matched}", style="dim")
        console.print(f"saved {saved}\nplot {plot}\nreview page {page}", style="dim")
    return 0


def _drafted_texts(source: EventStream, report: FidelityReport) -> dict[int, str]:
    """The text of every drafted and candidate token of the runs a review page shows."""
    ids = {
        token_id
        for by_row in report.lanes.values()
        for lane in by_row.values()
        for event in lane.rounds
        for token_id in round_token_ids(event)
    }
    return {token_id: source.token_text(token_id) for token_id in sorted(ids)}


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


def fidelity_table(report: FidelityReport, speed_measured: bool = True) -> Table:
    table = Table(
        title=f"fidelity · drafter {report.route} · {len(report.seeds)} samples per row",
        caption=_CAPTION + ("" if speed_measured else _REMOTE_CAPTION),
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
