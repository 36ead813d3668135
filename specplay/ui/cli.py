"""`specplay tui`: the playground, with the model and decoding flags of `specplay run`.

Importing this module does not import Textual, so the other commands start as fast as before.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specplay.cli.options import (
    add_decoding_flags,
    add_model_flags,
    add_sessions_dir_flag,
    drafters_from,
    route_map_from,
    settings_from,
    warn,
)
from specplay.engine.router import check_route
from specplay.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tui", help="the interactive playground: target-only and speculative side by side")
    add_model_flags(parser)
    add_decoding_flags(parser)
    group = parser.add_argument_group("playground")
    group.add_argument("--prompt", metavar="TEXT", default="", help="pre-fill the prompt")
    group.add_argument("--raw", action="store_true", help="encode the prompt as written, without the chat template")
    group.add_argument("--autorun", action="store_true", help="run the prompt as soon as the models are loaded")
    group.add_argument("--max-tokens", type=int, default=256)
    group.add_argument("--ignore-eos", action="store_true", help="generate --max-tokens tokens whatever comes")
    add_sessions_dir_flag(group)
    parser.set_defaults(command=tui)


def tui(args: argparse.Namespace) -> int:
    settings, drafters = settings_from(args), drafters_from(args)
    route_map = route_map_from(args)
    if args.max_tokens < 1:
        raise ConfigError("max_tokens", f"must be at least 1 (got {args.max_tokens})")
    if not drafters:
        raise ConfigError("draft", "is needed: the playground compares speculative decoding with target-only")
    check_route(settings.route, [name for name, _ in drafters])
    if args.mode != "speculative":
        warn("--mode is ignored: the playground always runs target-only and speculative side by side")

    from specplay.backends.mlx import blas, load_mlx_backend, release_thread
    from specplay.ui.app import PlaygroundOptions, create_app

    if message := blas.slow_blas_warning():
        warn(message)
    options = PlaygroundOptions(
        settings=settings,
        prompt=args.prompt,
        autorun=args.autorun,
        max_tokens=args.max_tokens,
        seed=args.seed,
        raw=args.raw,
        ignore_eos=args.ignore_eos,
        sessions_dir=Path(args.sessions_dir) if args.sessions_dir else None,
        route_map=route_map,
    )
    app = create_app(lambda: load_mlx_backend(args.target, drafters), options, on_exit=release_thread)
    app.run()
    return 0
