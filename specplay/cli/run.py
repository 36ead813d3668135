"""`specplay run`: one prompt, headless. Other tools and the tests rely on its output."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from rich.console import Console

from specplay.cli.options import (
    add_decoding_flags,
    add_model_flags,
    add_prompt_flags,
    add_sessions_dir_flag,
    drafters_from,
    prompt_from,
    route_map_from,
    settings_from,
    warn,
)
from specplay.cli.render import RunRecord, json_line, legend, make_console, summary, token_text
from specplay.engine.controls import LiveControls
from specplay.engine.events import ControlEvent, RoundEvent, StepEvent
from specplay.engine.loop import Request, SpecEngine
from specplay.engine.router import check_route
from specplay.errors import ConfigError
from specplay.runner import ModelThread
from specplay.store import SessionWriter, sessions_dir


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run one prompt headless and print the result")
    add_model_flags(parser)
    add_prompt_flags(parser)
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
    add_sessions_dir_flag(sessions)
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    # Everything that can be checked without models is checked before loading them.
    settings = settings_from(args)
    drafters = drafters_from(args)
    route_map = route_map_from(args)
    prompt = prompt_from(args)
    if args.max_tokens < 1:
        raise ConfigError("max_tokens", f"must be at least 1 (got {args.max_tokens})")
    if args.samples < 1:
        raise ConfigError("samples", f"must be at least 1 (got {args.samples})")
    if args.mode != "target" and not drafters:
        raise ConfigError("draft", f"is needed in {args.mode} mode: give at least one drafter")
    if drafters:
        check_route(settings.route, [name for name, _ in drafters])

    directory = sessions_dir(args.sessions_dir) if args.save else None

    from specplay.backends.mlx import blas, load_mlx_backend, release_thread

    if message := blas.slow_blas_warning():
        warn(message)
    thread = ModelThread(on_exit=release_thread)
    try:
        backend = thread.call(lambda: load_mlx_backend(args.target, drafters))
        identity = thread.call(backend.describe) if args.save else {}
        engine = SpecEngine(backend, route_map=route_map or None)
        token_ids = tuple(backend.encode(prompt, raw=args.raw))
        console = make_console()
        for seed in range(args.seed, args.seed + args.samples):
            request = Request(prompt, token_ids, args.mode, seed, args.max_tokens, args.ignore_eos)
            lanes = [args.mode] + (["target"] if args.mode == "speculative" and not args.no_baseline else [])
            writer = None
            if directory is not None:
                about = {"mode": args.mode, "seed": seed, "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos}
                about |= {"raw": args.raw, "route_map": engine.route_map}
                writer = SessionWriter(directory, prompt, list(token_ids), lanes, identity, about)
            try:
                if not args.json and args.samples > 1:
                    console.print(f"--- sample seed {seed} ---", style="dim")
                controls = LiveControls(settings, backend.drafters)
                record = _run_lane(thread, engine, request, controls, console, not args.json, writer)
                cancelled = record.done is not None and record.done.finish_reason == "cancelled"
                baseline = None
                if writer is not None and len(lanes) > 1 and not cancelled:
                    # The comparison: target-only with the same prompt, settings and seed.
                    target_only = replace(request, mode="target")
                    baseline = _run_lane(thread, engine, target_only, LiveControls(settings), console, False, writer)
                if writer is not None:
                    record.session = str(writer.finalize())
            finally:
                if writer is not None:
                    writer.close()
            if args.json:
                print(json_line(record, baseline), flush=True)
            else:
                console.print(summary(record, baseline), style="dim")
                if record.session:
                    console.print(f"saved {record.session}", style="dim")
            if cancelled:
                return 130
    finally:
        thread.close()
    return 0


def _run_lane(
    thread: ModelThread,
    engine: SpecEngine,
    request: Request,
    controls: LiveControls,
    console: Console,
    show: bool,
    writer: SessionWriter | None,
) -> RunRecord:
    """One generation on the model thread; tokens are printed (when `show`) and saved as they come."""
    record = RunRecord()
    if show and request.mode == "speculative":
        console.print(legend(), style="dim")
    events = thread.stream(lambda: engine.generate(request, controls))
    while True:
        try:
            for event in events:
                record.add(event)
                if writer is not None:
                    writer.write_event(request.mode, event)
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
