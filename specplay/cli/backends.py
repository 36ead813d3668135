"""Which backend runs the models: the one place every model-taking command asks.

`--backend mlx` (default) loads `--target` and `--draft` folders here. `--backend vllm` drives
vLLM servers: `--target-url`, and drafters as `--draft-url [NAME=]URL` (on a server) or
`--draft NAME=PATH` (on this machine's MLX: mixed mode). The API key comes from `--api-key` or
$SPECPLAY_API_KEY and goes only into request headers.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specplay.cli.options import check_drafter_names, drafters_from, use_demo_models, warn
from specplay.errors import ConfigError

BACKENDS = ("mlx", "vllm")
API_KEY_ENV = "SPECPLAY_API_KEY"


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("backend (--backend vllm drives vLLM servers on a GPU box)")
    group.add_argument("--backend", choices=BACKENDS, default="mlx", help="where the models run (default mlx)")
    group.add_argument(
        "--target-url", metavar="URL", help="vllm: the target's server, e.g. http://gpu-box:8000/v1 or its root"
    )
    group.add_argument(
        "--draft-url",
        metavar="[NAME=]URL",
        action="append",
        default=[],
        help="vllm: a drafter's server; repeat for several (--draft NAME=PATH adds a local MLX drafter)",
    )
    group.add_argument("--api-key", metavar="KEY", help=f"vllm: bearer token (default ${API_KEY_ENV})")
    group.add_argument(
        "--top-logprobs", type=int, default=20, metavar="K", help="vllm: top-K logprobs per position (server cap: 20)"
    )
    group.add_argument(
        "--vllm-strategy",
        choices=("auto", "prompt-logprobs", "prefixes"),
        default="auto",
        help="vllm: verify with prompt_logprobs, or with the k+1 prefixes (keeps the prefix cache); "
        "auto picks by context length",
    )
    group.add_argument(
        "--vllm-exact-correction",
        action="store_true",
        help="vllm: draw each correction exactly, by rejection from the target's samples at T > 0 "
        "(extra requests at rejected positions only)",
    )
    group.add_argument(
        "--vllm-native",
        action="store_true",
        help="vllm: let the target's server speculate itself (--speculative-config) and watch",
    )
    group.add_argument(
        "--baseline-url",
        metavar="URL",
        help="vllm native, playground: a plain server of the same target, for the target-only lane",
    )
    group.add_argument("--timeout", type=float, default=60.0, metavar="S", help="vllm: seconds to wait for a reply")


def uses_vllm(args: argparse.Namespace) -> bool:
    return getattr(args, "backend", "mlx") == "vllm"


def api_key(args: argparse.Namespace) -> str | None:
    return getattr(args, "api_key", None) or os.environ.get(API_KEY_ENV) or None


def remote_drafters(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(name, URL) of each --draft-url; unnamed ones are draft1, draft2, ..."""
    from specplay.backends.vllm.urls import named_url

    out = []
    for i, value in enumerate(getattr(args, "draft_url", []) or []):
        name, url = named_url(value)
        out.append((name or f"draft{i + 1}", url))
    return out


def native_route(args: argparse.Namespace) -> str:
    """Native mode: the route name of the --target-url server, `NAME=URL` or NATIVE_ROUTE."""
    from specplay.backends.vllm.native import NATIVE_ROUTE
    from specplay.backends.vllm.urls import named_url

    return named_url(args.target_url, "target_url")[0] or NATIVE_ROUTE


def drafter_names(args: argparse.Namespace) -> list[str]:
    """Every drafter's name, local and remote, checked for clashes. In native mode these are the
    speculating servers' route names, the --target-url server's first."""
    names = [name for name, _ in drafters_from(args)]
    if uses_vllm(args):
        names += [name for name, _ in remote_drafters(args)]
    if getattr(args, "vllm_native", False):
        names = [native_route(args), *names]
    check_drafter_names(names)
    return names


def check_models(args: argparse.Namespace) -> None:
    """The model flags make sense for the chosen backend (checked before anything loads)."""
    if not uses_vllm(args):
        if getattr(args, "draft_url", None) or getattr(args, "target_url", None):
            raise ConfigError("backend", "is mlx, which takes --target and --draft; add --backend vllm for URLs")
        use_demo_models(args)
        return
    if getattr(args, "target", None) is not None:
        raise ConfigError("target", "is for local models; with --backend vllm give --target-url URL")
    if not getattr(args, "target_url", None):
        raise ConfigError("target_url", "is required with --backend vllm (e.g. http://gpu-box:8000/v1)")
    from specplay.backends.vllm.urls import named_url, server_root

    if getattr(args, "vllm_native", False):
        named_url(args.target_url, "target_url")  # speculating servers are routed to by name
    else:
        server_root(args.target_url)
    if args.top_logprobs < 1:
        raise ConfigError("top_logprobs", f"must be at least 1 (got {args.top_logprobs})")
    if args.timeout <= 0:
        raise ConfigError("timeout", f"must be above 0 seconds (got {args.timeout})")
    drafter_names(args)


@dataclass(frozen=True)
class BackendChoice:
    """How to load the chosen backend: `load` runs on the model thread, `on_exit` as it ends."""

    load: Callable[[], Any]
    on_exit: Callable[[], None] | None
    kind: str


def load_backend(args: argparse.Namespace) -> BackendChoice:
    """The backend the flags ask for, as a loader for the model thread (nothing loads here).
    Warns once when MLX will run models here without a fast BLAS."""
    check_models(args)
    if message := blas_warning(args):
        warn(message)
    local = drafters_from(args)
    if not uses_vllm(args):
        from specplay.backends.mlx import load_mlx_backend, release_thread

        target = args.target
        return BackendChoice(lambda: load_mlx_backend(target, local), release_thread, "mlx")
    from specplay.backends.vllm import connect_vllm_backend

    remote, key = remote_drafters(args), api_key(args)
    on_exit = None
    if local:  # mixed mode: the local drafters' MLX work runs on the model thread
        from specplay.backends.mlx import release_thread

        on_exit = release_thread

    def load() -> Any:
        return connect_vllm_backend(
            args.target_url,
            remote,
            local,
            key,
            args.top_logprobs,
            args.vllm_strategy,
            args.timeout,
            exact_correction=getattr(args, "vllm_exact_correction", False),
        )

    return BackendChoice(load, on_exit, "vllm")


def blas_warning(args: argparse.Namespace) -> str | None:
    """The slow-BLAS warning, when MLX will run models here."""
    if uses_vllm(args) and not drafters_from(args):
        return None
    from specplay.backends.mlx import blas

    return blas.slow_blas_warning()
