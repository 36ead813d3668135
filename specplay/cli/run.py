"""`specplay run`: one prompt, or a conversation of several, headless. Other tools and the tests
rely on its output."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.text import Text

from specplay.backends import blas_warning, open_stream
from specplay.cli.configure import given, replay_base, run_config, sessions_dir_from, with_recorded_routes
from specplay.cli.flags import (
    add_backend_flags,
    add_decoding_flags,
    add_model_flags,
    add_output_flags,
    add_prompt_flags,
    add_router_flag,
    add_sessions_dir_flag,
)
from specplay.cli.render import (
    colourless,
    conversation_line,
    inform,
    json_line,
    legend,
    make_console,
    run_json,
    summary,
    token_text,
    warn,
)
from specplay.config.api_key import KEY_WITHHELD
from specplay.config.model_sets import models_named
from specplay.config.run_config import RunConfig, check, remembered_line
from specplay.display.text import one_line
from specplay.engine.events import ControlEvent, Event, RoundEvent, StepEvent
from specplay.engine.request import Request
from specplay.engine.settings import AUTO_ROUTE
from specplay.engine.tree import drafted_as_chains
from specplay.errors import ConfigError
from specplay.runner.session_run import TurnRun, run_sample
from specplay.store import find_session, load_session
from specplay.store.location import check_sessions_folder


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one prompt (or a conversation: --prompt once per turn) headless and print the result "
        "(the speculative lane; --compare or --save add the target-only lane and the speedup)",
    )
    add_model_flags(parser)  # a --replay session supplies them
    add_backend_flags(parser)
    add_prompt_flags(parser, turns=True)
    add_decoding_flags(parser)
    add_router_flag(parser)
    output = parser.add_argument_group("output")
    add_output_flags(output)
    output.add_argument("--samples", type=int, default=1, metavar="N", help="N generations, seeds S..S+N-1")
    output.add_argument("--json", action="store_true", help="one JSON object per sample, one per line")
    output.add_argument(
        "--compare",
        action="store_true",
        help="also run the target-only lane after it and print the measured speedup (--save does this too)",
    )
    sessions = parser.add_argument_group("sessions")
    sessions.add_argument(
        "--save", action="store_true", help="save each sample as a session, with its target-only comparison lane"
    )
    sessions.add_argument(
        "--no-baseline", action="store_true", help="with --save, skip the target-only comparison lane"
    )
    sessions.add_argument(
        "--replay",
        metavar="SESSION",
        help="re-run a saved session; flags given here change its settings (model flags replace its models)",
    )
    add_sessions_dir_flag(sessions)
    parser.set_defaults(command=run)


def configure(args: argparse.Namespace) -> RunConfig:
    """The run's configuration: the flags, over the replayed session's when there is one."""
    flags = given(args)
    base = None
    if args.replay:
        base = replay_base(load_session(find_session(args.replay, sessions_dir_from(flags))), flags)
    config = run_config(flags, base)
    if base is None:  # a replay routes as the session did
        config = with_recorded_routes(config, flags)
    if config.request.prompt is None:
        raise ConfigError("prompt", "or --prompt-file is required (or --replay SESSION)")
    check(config)
    if args.samples < 1:
        raise ConfigError("samples", f"must be at least 1 (got {args.samples})")
    if args.save:
        check_sessions_folder(config.sessions_dir)  # now, before the models load
    return config


def run(args: argparse.Namespace) -> int:
    config = configure(args)
    if config.vllm.key_withheld:
        warn(KEY_WITHHELD)
    if message := blas_warning(config):
        warn(message)
    if line := remembered_line(config):
        inform(line)
    return _run(config, args)


def _stopping() -> None:
    warn("stopping at the end of this round; Ctrl-C again quits at once (the session is kept, incomplete)")


def _run(config: RunConfig, args: argparse.Namespace) -> int:
    """The models load and run here, on the main thread, where the events are read."""
    stream = open_stream(config)
    try:
        identity = stream.describe() if args.save else {}
        request_config = config.request
        assert request_config.prompt is not None
        token_ids = tuple(stream.encode(request_config.prompt, raw=request_config.raw))
        console = make_console()
        caps = stream.capabilities
        routed = request_config.mode != "target" and config.settings.route == AUTO_ROUTE
        choices = [stream.routing.choice(prompt) if routed else None for prompt in request_config.prompts]
        conversation = len(request_config.prompts) > 1
        if not args.json:
            if request_config.mode == "speculative":
                console.print(legend(marks=colourless(console)), style="dim")
            console.print(f"models: {models_named(config)}", style="dim")
            if not caps.live_controls and caps.fixed_by:
                console.print(caps.fixed_by, style="dim")
            if choices[0] is not None and not conversation:
                console.print(choices[0].describe(), style="dim")
        for seed in range(request_config.seed, request_config.seed + args.samples):
            request = Request(
                prompt=request_config.prompt,
                prompt_token_ids=token_ids,
                mode=request_config.mode,
                seed=seed,
                max_tokens=request_config.max_tokens,
                ignore_eos=request_config.ignore_eos,
            )
            if not args.json and args.samples > 1:
                console.print(f"--- sample seed {seed} ---", style="dim")
            printer = _Printer(console, live=not args.json and not caps.server_judges)

            def turn_starts(index: int, prompt: str) -> None:
                if conversation and not args.json:
                    console.print(_turn_heading(index, len(request_config.prompts), prompt), style="bold")
                    if (choice := choices[index]) is not None:
                        console.print(choice.describe(), style="dim")

            def turn_done(turn: TurnRun) -> None:
                if not args.json:
                    _finish(console, turn, caps.wall_time_is_speed, caps.server_judges)

            result = run_sample(
                stream,
                config,
                request,
                on_event=printer.take,
                save=args.save,
                baseline=args.compare or (args.save and not args.no_baseline),
                identity=identity,
                on_interrupt=_stopping,
                follow_ups=request_config.follow_ups,
                on_turn=turn_starts,
                on_turn_done=turn_done,
            )
            session = str(result.session) if result.session else None
            models = models_named(config)
            if args.json and conversation:
                turns = [
                    {"prompt": turn.prompt, **run_json(turn.main, turn.baseline, choices[turn.index])}
                    for turn in result.turns
                ]
                print(conversation_line(turns, session, models), flush=True)
            elif args.json:
                print(json_line(result.main, result.baseline, session, choices[0], models=models), flush=True)
            elif session:
                console.print(f"saved {session}", style="dim")
            if result.cancelled:
                return 130
    finally:
        stream.close()
    return 0


def _turn_heading(index: int, count: int, prompt: str) -> Text:
    """Where a conversation's turn starts in the transcript: its number and its prompt."""
    return Text(f"── turn {index + 1} of {count}: {one_line(prompt)}")


class _Printer:
    """Prints the main lane's tokens as they come (`live`); the target-only lane stays silent."""

    def __init__(self, console: Console, live: bool) -> None:
        self.console, self.live = console, live
        self.marks = colourless(console)
        self.main: str | None = None

    def take(self, lane: str, event: Event) -> None:
        self.main = self.main or lane
        if not self.live or lane != self.main:
            return
        if isinstance(event, RoundEvent):
            for token in event.tokens:
                self.console.print(token_text(token, self.marks), end="")
        elif isinstance(event, StepEvent):
            self.console.print(token_text(event.token, self.marks), end="")
        elif isinstance(event, ControlEvent):
            self.console.print(f"[{', '.join(f'{n}={new}' for n, _, new in event.changes)}]", style="dim", end="")


def _finish(console: Console, result: TurnRun, speed_measured: bool, server_judges: bool) -> None:
    """A turn's text (printed now if its colours were only final at the end), then its stats lines."""
    if server_judges:
        console.print(Text().join(token_text(token, colourless(console)) for token in result.main.tokens))
    else:
        sys.stdout.flush()
        console.print()
    console.print(summary(result.main, result.baseline, speed_measured), style="dim")
    for model, why in drafted_as_chains(result.main.metrics).items():
        console.print(f"{model} drafted chains, not trees: {why}", style="dim")
    if "vllm" in result.main.metrics:  # inspection through vLLM servers: their account of the run
        from specplay.backends.vllm.report import inspection_report, report_line

        console.print(report_line(inspection_report(result.main.metrics)), style="dim")
