"""Backends run the models; `open_stream` turns a run configuration into the event stream every
command and the playground talk to. Each backend is imported only when a configuration asks for
it, so a vLLM-only run never loads MLX."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specplay.config.run_config import RunConfig
from specplay.engine.routers.routing import fallback_for, routing_for
from specplay.engine.stream import EventStream

Progress = Callable[[str, int, int], None]
"""(stage, done, total): converting a GGUF file ("hashing" bytes, "converting" tensors)."""


def open_stream(config: RunConfig, on_progress: Progress | None = None) -> EventStream:
    """Load or connect what `config` names; call on the model thread (MLX state is per thread).
    GGUF files are converted first, once (`on_progress` follows it), then load like folders.
    `--route auto` asks the learned router the configuration holds, if any, else the heuristic."""
    router = config.router.router if config.router is not None else None
    fallback = (
        fallback_for(router, config.drafter_names, config.router.fallback_map, config.router.fallback_notes)
        if config.router is not None
        else None
    )
    routing = routing_for(config.drafter_names, router, config.route_map, config.route_notes, fallback)
    for model in config.local_models:
        if model.kind == "gguf":
            from specplay.backends.mlx.gguf import converted_folder

            converted_folder(Path(model.location), on_progress=on_progress)
    if config.backend == "mlx":
        from specplay.backends.mlx import load_mlx_backend
        from specplay.engine.loop import SpecEngine

        drafters = [(m.name, m) for m in config.drafters]
        backend = load_mlx_backend(config.target.location, drafters, config.earlier_outputs)
        return SpecEngine(backend, routing)
    options = config.vllm
    local = [(m.name, m.location) for m in config.drafters if m.local]
    servers = [(m.name, m.location) for m in config.drafters if m.on_server]
    if options.native:
        from specplay.backends.vllm.native_stream import connect_native

        return connect_native(
            config.target.location,
            servers,
            options.baseline_url,
            options.api_key,
            options.timeout_s,
            route=config.drafter_names[0],
            routing=routing,
            auth=dict(options.logins),
        )
    from specplay.backends.vllm import connect_vllm_backend
    from specplay.engine.loop import SpecEngine

    backend = connect_vllm_backend(
        config.target.location,
        remote_drafters=servers,
        local_drafters=local,
        api_key=options.api_key,
        top_logprobs=options.top_logprobs,
        strategy=options.strategy,
        timeout_s=options.timeout_s,
        exact_correction=options.exact_correction,
        auth=dict(options.logins),
    )
    return SpecEngine(backend, routing)


def thread_cleanup(config: RunConfig) -> Callable[[], None] | None:
    """What the model thread must run as it ends: MLX's per-thread streams, where it used MLX."""
    if not config.local_models:
        return None
    from specplay.backends.mlx import release_thread

    return release_thread


def blas_threads(config: RunConfig) -> str | None:
    """OpenBLAS's thread count and who chose it, where MLX runs models here on OpenBLAS (None
    elsewhere); after the target has loaded, which fits the count."""
    if not config.local_models:
        return None
    from specplay.backends.mlx import blas

    return blas.THREADS_CHOSEN if blas.OPENBLAS_PATH else None


def refit_blas_threads(config: RunConfig, moment: str) -> None:
    """Where MLX runs models here, fit OpenBLAS's thread count to the CPUs other work leaves free
    now (`moment`: when, as `blas_threads` will say); call on the model thread, between runs."""
    if not config.local_models:
        return
    from specplay.backends.mlx import blas

    blas.refit_threads(moment)


def blas_warning(config: RunConfig) -> str | None:
    """The slow-BLAS warning, when MLX will run models here."""
    if not config.local_models:
        return None
    from specplay.backends.mlx import blas

    return blas.slow_blas_warning()
