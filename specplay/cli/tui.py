"""`specplay tui`: the playground, with the model and decoding flags of `specplay run`.

Importing this module does not import Textual, so the other commands start fast.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from specplay.backends import blas_warning
from specplay.cli.configure import given, replay_base, run_config, sessions_dir_from, with_recorded_routes
from specplay.cli.flags import (
    UNSET,
    add_backend_flags,
    add_decoding_flags,
    add_model_flags,
    add_output_flags,
    add_raw_flag,
    add_router_flag,
    add_sessions_dir_flag,
)
from specplay.cli.render import warn
from specplay.config.run_config import RunConfig, check
from specplay.errors import SpecplayError, error_line
from specplay.store import find_session, load_session
from specplay.store.location import check_sessions_folder

if TYPE_CHECKING:  # Textual loads only when the playground starts
    from specplay.ui.app import PlaygroundOptions


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tui", help="the interactive playground: target-only and speculative side by side")
    add_model_flags(parser)
    add_backend_flags(parser)
    add_decoding_flags(parser)
    add_router_flag(parser)
    group = parser.add_argument_group("playground")
    prompt_from = group.add_mutually_exclusive_group()
    prompt_from.add_argument(
        "--prompt", metavar="TEXT", default=UNSET, help="pre-fill the prompt (default: the first of the prompt library)"
    )
    prompt_from.add_argument(
        "--prompt-file", metavar="F", type=Path, default=UNSET, help="pre-fill the prompt from a file"
    )
    add_raw_flag(group)
    group.add_argument("--autorun", action="store_true", help="run the prompt as soon as the models are loaded")
    add_output_flags(group)
    group.add_argument(
        "--open",
        metavar="SESSION",
        help="show a saved session read-only (path, file name or id); ctrl+r re-runs it. "
        "Its own models load unless model flags are given",
    )
    add_sessions_dir_flag(group)
    parser.set_defaults(command=tui)


def configure(args: argparse.Namespace) -> tuple[RunConfig, Path | None]:
    """The playground's configuration, and the session to open read-only (its own configuration
    under the flags given) if any."""
    flags = given(args)
    base, opened = None, None
    if args.open:
        opened = find_session(args.open, sessions_dir_from(flags))
        base = replay_base(load_session(opened), flags)
    config = run_config(flags, base)
    if base is None:  # a session opened routes as it did
        config = with_recorded_routes(config, flags)
    if config.request.mode != "speculative":
        if "mode" in flags:
            warn("--mode is ignored: the playground always runs target-only and speculative side by side")
        config = replace(config, request=replace(config.request, mode="speculative"))
    if config.request.prompt is None:
        config = replace(config, request=replace(config.request, prompt=_first_library_prompt()))
    check(config)  # a model that is not there first, then a missing drafter (speculative mode needs one)
    check_sessions_folder(config.sessions_dir)  # the playground saves every run
    return config, opened


def terminal_problem() -> str | None:
    """Why the playground cannot draw here (None: it can): it needs a terminal to read keys from
    and draw on, or it would run unseen until killed."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        return None
    side = "input" if not sys.stdin.isatty() else "output"
    return f"the playground needs a terminal, and its {side} is not one: use `specplay run` to write to a pipe or file"


def tui(args: argparse.Namespace) -> int:
    # Keys typed while the command starts (imports, checking the models, loading Textual) reach the
    # playground: `specplay.cli.main` holds them from its first line.
    config, opened = configure(args)
    if problem := terminal_problem():
        raise SpecplayError(problem)
    if message := blas_warning(config):
        warn(message)
    from specplay.ui.app import create_app

    app = create_app(config, playground_options(args, config, opened))
    app.run()
    if app.crash is not None:
        print(f"specplay: error: the playground crashed: {error_line(app.crash)}", file=sys.stderr)
        return 1
    return app.return_code or 0


def playground_options(args: argparse.Namespace, config: RunConfig, opened: Path | None) -> PlaygroundOptions:
    """A session opened from vLLM servers is shown without contacting them: they load when the
    user asks for a run (a shared session names servers the user did not choose)."""
    from specplay.ui.app import PlaygroundOptions

    vllm_session = opened is not None and config.backend == "vllm"
    return PlaygroundOptions(autorun=args.autorun, open_session=opened, load_on_run=vllm_session)


def _first_library_prompt() -> str:
    """So that ctrl+r runs something at once in a fresh playground."""
    from specplay.data.library import library_prompts

    prompts = library_prompts()
    return prompts[0].text if prompts else ""
