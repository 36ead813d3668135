"""`specplay tui`: the playground, with the model and decoding flags of `specplay run`.

Importing this module does not import Textual, so the other commands start as fast as before.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specplay.cli.backends import (
    BackendChoice,
    add_backend_flags,
    api_key,
    check_models,
    drafter_names,
    load_backend,
    remote_drafters,
)
from specplay.cli.options import (
    add_decoding_flags,
    add_model_flags,
    add_sessions_dir_flag,
    route_map_from,
    settings_from,
    warn,
)
from specplay.engine.router import check_route
from specplay.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tui", help="the interactive playground: target-only and speculative side by side")
    add_model_flags(parser)
    add_backend_flags(parser)
    add_decoding_flags(parser)
    group = parser.add_argument_group("playground")
    group.add_argument(
        "--prompt", metavar="TEXT", default="", help="pre-fill the prompt (default: the first of the prompt library)"
    )
    group.add_argument("--raw", action="store_true", help="encode the prompt as written, without the chat template")
    group.add_argument("--autorun", action="store_true", help="run the prompt as soon as the models are loaded")
    group.add_argument("--max-tokens", type=int, default=256)
    group.add_argument("--ignore-eos", action="store_true", help="generate --max-tokens tokens whatever comes")
    group.add_argument(
        "--open",
        metavar="SESSION",
        help="show a saved session read-only (path, file name or id); ctrl+r re-runs it. "
        "Its own models load unless model flags are given",
    )
    add_sessions_dir_flag(group)
    parser.set_defaults(command=tui, parser=parser)


def _open_session(args: argparse.Namespace) -> tuple[argparse.Namespace, Path]:
    """The session --open names; with no model flags, its models' flags go before the user's."""
    from specplay.store import find_session, load_session, sessions_dir
    from specplay.store.replay import model_flags

    path = find_session(args.open, sessions_dir(args.sessions_dir))
    header = load_session(path).header
    given = (args.target, args.target_url, args.draft, args.draft_url)
    if not any(given) and "target" in header.get("backend", {}).get("models", {}):
        argv = args.argv
        args = args.parser.parse_args([*model_flags(header["backend"]), *argv[argv.index("tui") + 1 :]])
        args.argv = argv
    return args, path


def tui(args: argparse.Namespace) -> int:
    opened = None
    if args.open:
        args, opened = _open_session(args)
    settings = settings_from(args)
    if args.vllm_native:
        from specplay.cli.vllm_native import check_native

        check_native(args, settings)
        drafters = drafter_names(args)
    else:
        check_models(args)
        drafters = drafter_names(args)
    route_map = route_map_from(args)
    if args.max_tokens < 1:
        raise ConfigError("max_tokens", f"must be at least 1 (got {args.max_tokens})")
    if not drafters:
        raise ConfigError("draft", "is needed: the playground compares speculative decoding with target-only")
    check_route(settings.route, drafters)
    if args.mode != "speculative":
        warn("--mode is ignored: the playground always runs target-only and speculative side by side")

    from specplay.ui.app import PlaygroundOptions, create_app

    choice = _native_backend(args) if args.vllm_native else load_backend(args)
    options = PlaygroundOptions(
        settings=settings,
        prompt=args.prompt or ("" if args.open else _first_library_prompt()),
        autorun=args.autorun,
        max_tokens=args.max_tokens,
        seed=args.seed,
        raw=args.raw,
        ignore_eos=args.ignore_eos,
        sessions_dir=Path(args.sessions_dir) if args.sessions_dir else None,
        route_map=route_map,
        open_session=opened,
    )
    app = create_app(choice.load, options, on_exit=choice.on_exit)
    app.run()
    return 0


def _native_backend(args: argparse.Namespace) -> BackendChoice:
    """vLLM's native mode: speculating servers (--target-url, and one per --draft-url to route
    between), and a plain one for target-only if given."""
    from specplay.backends.vllm.native_run import connect_native

    url, more, baseline, key, timeout_s = (
        args.target_url,
        remote_drafters(args),
        args.baseline_url,
        api_key(args),
        args.timeout,
    )
    return BackendChoice(lambda: connect_native(url, more, baseline, key, timeout_s), None, "vllm")


def _first_library_prompt() -> str:
    """So that ctrl+r runs something at once in a fresh playground."""
    from specplay.ui.library import library_prompts

    prompts = library_prompts()
    return prompts[0].text if prompts else ""
