"""`specplay run`: one prompt, headless. Other tools and the tests rely on its output."""

from __future__ import annotations

import argparse
import sys

from specplay.cli.options import (
    add_decoding_flags,
    add_model_flags,
    add_prompt_flags,
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

    from specplay.backends.mlx import blas, load_mlx_backend, release_thread

    if message := blas.slow_blas_warning():
        warn(message)
    thread = ModelThread(on_exit=release_thread)
    try:
        backend = thread.call(lambda: load_mlx_backend(args.target, drafters))
        engine = SpecEngine(backend, route_map=route_map or None)
        token_ids = tuple(backend.encode(prompt, raw=args.raw))
        console = make_console()
        for seed in range(args.seed, args.seed + args.samples):
            request = Request(prompt, token_ids, args.mode, seed, args.max_tokens, args.ignore_eos)
            controls = LiveControls(settings, backend.drafters)
            record = _run_one(thread, engine, request, controls, console, args.json, args.samples > 1)
            if args.json:
                print(json_line(record), flush=True)
            if record.done is not None and record.done.finish_reason == "cancelled":
                return 130
    finally:
        thread.close()
    return 0


def _run_one(thread, engine, request, controls, console, as_json: bool, numbered: bool) -> RunRecord:
    record = RunRecord()
    if not as_json:
        if numbered:
            console.print(f"--- sample seed {request.seed} ---", style="dim")
        if request.mode == "speculative":
            console.print(legend(), style="dim")
    events = thread.stream(lambda: engine.generate(request, controls))
    while True:
        try:
            for event in events:
                record.add(event)
                if as_json:
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
    if not as_json:
        sys.stdout.flush()
        console.print()
        console.print(summary(record), style="dim")
    return record
