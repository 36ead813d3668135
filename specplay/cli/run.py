"""`specplay run`: one prompt, headless. Other tools and the tests rely on its output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace

from rich.console import Console

from specplay.cli.backends import add_backend_flags, check_models, drafter_names, load_backend
from specplay.cli.options import (
    add_decoding_flags,
    add_model_flags,
    add_prompt_flags,
    add_sessions_dir_flag,
    prompt_from,
    route_map_from,
    settings_from,
)
from specplay.cli.render import RunRecord, json_line, legend, make_console, summary, token_text
from specplay.engine.controls import LiveControls
from specplay.engine.events import ControlEvent, Event, RoundEvent, StepEvent
from specplay.engine.loop import Request, SpecEngine
from specplay.engine.router import check_route
from specplay.engine.settings import SpecSettings
from specplay.errors import ConfigError
from specplay.runner.thread import ModelThread
from specplay.store import SessionWriter, find_session, load_session, sessions_dir
from specplay.store.replay import replay_flags


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run one prompt headless and print the result")
    add_model_flags(parser)  # a --replay session supplies them
    add_backend_flags(parser)
    add_prompt_flags(parser, required=False)
    add_decoding_flags(parser)
    output = parser.add_argument_group("output")
    output.add_argument("--max-tokens", type=int, default=256)
    output.add_argument("--ignore-eos", action="store_true", help="generate --max-tokens tokens whatever comes")
    output.add_argument("--samples", type=int, default=1, metavar="N", help="N generations, seeds S..S+N-1")
    output.add_argument("--json", action="store_true", help="one JSON object per sample, one per line")
    sessions = parser.add_argument_group("sessions")
    sessions.add_argument("--save", action="store_true", help="save each sample as a session")
    sessions.add_argument(
        "--no-baseline", action="store_true", help="with --save, skip the target-only comparison lane"
    )
    sessions.add_argument(
        "--replay", metavar="SESSION", help="re-run a saved session; flags given here change its settings"
    )
    add_sessions_dir_flag(sessions)
    parser.set_defaults(command=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    if args.replay:
        # The session's own flags first, then the user's: later flags win.
        session = load_session(find_session(args.replay, sessions_dir(args.sessions_dir)))
        args = args.parser.parse_args([*replay_flags(session), *_without_replay(args.argv)])
    settings, _, prompt = _checked(args)
    directory = sessions_dir(args.sessions_dir) if args.save else None
    if args.vllm_native:
        from specplay.cli.vllm_native import run_native

        return run_native(args, settings, prompt, directory)
    choice = load_backend(args)
    thread = ModelThread(on_exit=choice.on_exit)
    try:
        backend = thread.call(choice.load)
        identity = thread.call(backend.describe) if args.save else {}
        engine = SpecEngine(backend, route_map=route_map_from(args) or None)
        token_ids = tuple(backend.encode(prompt, raw=args.raw))
        console = make_console()
        for seed in range(args.seed, args.seed + args.samples):
            request = Request(prompt, token_ids, args.mode, seed, args.max_tokens, args.ignore_eos)
            writer = None
            if directory is not None:
                lanes = [args.mode] + (["target"] if args.mode == "speculative" and not args.no_baseline else [])
                about = {"mode": args.mode, "seed": seed, "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos}
                about |= {"raw": args.raw, "route_map": engine.route_map}
                writer = SessionWriter(directory, prompt, list(token_ids), lanes, identity, about)
            if not args.json and args.samples > 1:
                console.print(f"--- sample seed {seed} ---", style="dim")
            record, baseline = _run_sample(thread, engine, request, settings, console, not args.json, writer)
            report = _backend_report(backend, record)
            if args.json:
                line = json_line(record, baseline)
                print(line if report is None else json.dumps(json.loads(line) | {"vllm": report}), flush=True)
            else:
                # Through vLLM inspection, tokens/s times HTTP round trips: no measured speedup.
                console.print(summary(record, baseline if report is None else None), style="dim")
                if report is not None:
                    from specplay.backends.vllm.report import report_line

                    console.print(report_line(report), style="dim")
                if record.session:
                    console.print(f"saved {record.session}", style="dim")
            if record.done is not None and record.done.finish_reason == "cancelled":
                return 130
    finally:
        thread.close()
    return 0


def _backend_report(backend: object, record: RunRecord) -> dict | None:
    """A remote backend's own account of the run (vLLM: tokens per target call, exactness)."""
    report = getattr(backend, "inspection_report", None)
    if report is None or record.done is None or record.start is None or record.start.mode != "speculative":
        return None
    return report(record.done.metrics)


def _checked(args: argparse.Namespace) -> tuple[SpecSettings, list[str], str]:
    """Everything that can be checked without models, checked before loading them."""
    check_models(args)
    if args.prompt is None and args.prompt_file is None:
        raise ConfigError("prompt", "or --prompt-file is required (or --replay SESSION)")
    settings, drafters, prompt = settings_from(args), drafter_names(args), prompt_from(args)
    route_map_from(args)
    if args.max_tokens < 1:
        raise ConfigError("max_tokens", f"must be at least 1 (got {args.max_tokens})")
    if args.samples < 1:
        raise ConfigError("samples", f"must be at least 1 (got {args.samples})")
    if args.mode != "target" and not drafters and not args.vllm_native:
        raise ConfigError("draft", f"is needed in {args.mode} mode: give at least one drafter")
    if drafters:
        check_route(settings.route, drafters)
    return settings, drafters, prompt


def _run_sample(
    thread: ModelThread,
    engine: SpecEngine,
    request: Request,
    settings: SpecSettings,
    console: Console,
    show: bool,
    writer: SessionWriter | None,
) -> tuple[RunRecord, RunRecord | None]:
    """The requested lane, then, when saving a speculative run, its target-only comparison."""
    try:
        controls = LiveControls(settings, engine.backend.drafters)
        record = stream_lane(
            thread, lambda: engine.generate(request, controls), request.mode, controls, console, show, writer
        )
        cancelled = record.done is not None and record.done.finish_reason == "cancelled"
        baseline = None
        if writer is not None and request.mode == "speculative" and writer.lanes[1:] and not cancelled:
            target_only = replace(request, mode="target")
            plain = LiveControls(settings)
            baseline = stream_lane(
                thread, lambda: engine.generate(target_only, plain), "target", plain, console, False, writer
            )
        if writer is not None:
            record.session = str(writer.finalize())
        return record, baseline
    finally:
        if writer is not None:
            writer.close()


def _without_replay(argv: list[str]) -> list[str]:
    """The user's `run` flags, minus the command name and --replay with its value."""
    flags = argv[argv.index("run") + 1 :]
    for i, flag in enumerate(flags):
        if flag == "--replay":
            return flags[:i] + flags[i + 2 :]
        if flag.startswith("--replay="):
            return flags[:i] + flags[i + 1 :]
    return flags


def stream_lane(
    thread: ModelThread,
    generate: Callable[[], Iterator[Event]],
    mode: str,
    controls: LiveControls,
    console: Console,
    show: bool,
    writer: SessionWriter | None,
) -> RunRecord:
    """One generation's events, made on the model thread by `generate`; tokens are printed (when
    `show`) and saved as they come. Ctrl-C asks the run to stop at its next round and keeps it."""
    record = RunRecord()
    if show and mode == "speculative":
        console.print(legend(), style="dim")
    events = thread.stream(generate)
    while True:
        try:
            for event in events:
                record.add(event)
                if writer is not None:
                    writer.write_event(mode, event)
                if not show:
                    continue
                if isinstance(event, RoundEvent):
                    for token in event.tokens:
                        console.print(token_text(token), end="")
                elif isinstance(event, StepEvent):
                    console.print(token_text(event.token), end="")
                elif isinstance(event, ControlEvent):
                    console.print(f"[{', '.join(f'{n}={new}' for n, _, new in event.changes)}]", style="dim", end="")
            break
        except KeyboardInterrupt:
            controls.request_stop()  # the engine ends at the next round; keep reading its last events
    if show:
        sys.stdout.flush()
        console.print()
    return record
