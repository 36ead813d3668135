"""Backends run the models; `open_source` turns a run configuration into the event source every
command and the playground talk to. Each backend is imported only when a configuration asks for
it, so a vLLM-only run never loads MLX."""

from __future__ import annotations

from collections.abc import Callable

from specplay.config.run import RunConfig
from specplay.engine.source import EventSource
from specplay.errors import ModelError


def open_source(config: RunConfig) -> EventSource:
    """Load or connect what `config` names; call on the model thread (MLX state is per thread)."""
    for model in (config.target, *config.drafters):
        if model.kind not in ("mlx", "server"):
            raise ModelError(f"{model.name}: {model.kind} models cannot be loaded by this version of specplay")
    local = [(m.name, m.location) for m in config.drafters if m.kind == "mlx"]
    if config.backend == "mlx":
        from specplay.backends.mlx import load_mlx_backend
        from specplay.engine.loop import SpecEngine

        return SpecEngine(load_mlx_backend(config.target.location, local), route_map=config.route_map)
    options = config.vllm
    servers = [(m.name, m.location) for m in config.drafters if m.kind == "server"]
    if options.native:
        from specplay.backends.vllm.native_source import connect_native

        return connect_native(
            config.target.location,
            servers,
            options.baseline_url,
            options.api_key,
            options.timeout_s,
            route=config.drafter_names[0],
            route_map=config.route_map,
            auth=dict(options.logins),
        )
    from specplay.backends.vllm import connect_vllm_backend
    from specplay.engine.loop import SpecEngine

    backend = connect_vllm_backend(
        config.target.location,
        servers,
        local,
        options.api_key,
        options.top_logprobs,
        options.strategy,
        options.timeout_s,
        exact_correction=options.exact_correction,
        auth=dict(options.logins),
    )
    return SpecEngine(backend, route_map=config.route_map)


def thread_cleanup(config: RunConfig) -> Callable[[], None] | None:
    """What the model thread must run as it ends: MLX's per-thread streams, where it used MLX."""
    if not config.local_models:
        return None
    from specplay.backends.mlx import release_thread

    return release_thread


def blas_warning(config: RunConfig) -> str | None:
    """The slow-BLAS warning, when MLX will run models here."""
    if not config.local_models:
        return None
    from specplay.backends.mlx import blas

    return blas.slow_blas_warning()
