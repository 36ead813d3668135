"""A saved session as the configuration that ran it, for `run --replay` and `tui --open`: a
conversation's configuration holds all its prompts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from specplay.config.run_config import TARGET, BackendKind, RunConfig, VllmOptions
from specplay.config.urls import server_root
from specplay.drafters import ModelConfig, Role, replay_model
from specplay.errors import ConfigError
from specplay.store.codec import request_from_record
from specplay.store.format import Session, SessionError

Models = tuple[BackendKind, ModelConfig, tuple[ModelConfig, ...], VllmOptions]


def session_config(session: Session, models: Models | None = None) -> RunConfig:
    """Its models (or `models`, the ones the user gave instead), request (a conversation's every
    prompt) and the settings in force at the start of its main lane. Local folders are saved
    absolute (a Hugging Face id resolves to the same cached snapshot); servers by address, never
    with the API key, which comes again from --api-key or $SPECPLAY_API_KEY, and only for servers
    the user names again. An address that is not one (ConfigError, a ValueError) fails as any
    unreadable model record does."""
    backend = session.header.get("backend") or {}
    if models is None:
        try:
            models = ("vllm" if backend.get("backend") == "vllm" else "mlx", *_models(backend))
        except (KeyError, TypeError, AttributeError, ValueError):
            raise SessionError(
                f"session {session.path} does not name its models; give them with --target and --draft"
            ) from None
    kind, target, drafters, options = models
    request = request_from_record(session.header.get("request") or {}, session.prompt)
    request = replace(request, follow_ups=tuple(turn.prompt for turn in session.turns[1:]))
    route_map = dict((session.header.get("request") or {}).get("route_map") or {})
    return RunConfig(
        target=target,
        drafters=drafters,
        backend=kind,
        vllm=options,
        request=request,
        settings=session.main.settings,
        route_map=route_map,
    )


def _models(backend: Mapping[str, Any]) -> tuple[ModelConfig, tuple[ModelConfig, ...], VllmOptions]:
    models = dict(backend["models"])
    target = models.pop(TARGET)
    if backend.get("backend") != "vllm":
        drafters = tuple(local_model(name, "drafter", m) for name, m in models.items())
        return local_model(TARGET, "target", target), drafters, VllmOptions()
    if backend.get("mode") == "native":  # speculating servers are routed to by name, as drafters are
        params = {"route": target["route"]} if "route" in target else {}
        baseline = backend.get("baseline")
        servers = tuple(ModelConfig(name, "drafter", "server", server_root(m["source"])) for name, m in models.items())
        options = VllmOptions(native=True, baseline_url=server_root(baseline["source"]) if baseline else None)
        return ModelConfig(TARGET, "target", "server", server_root(target["source"]), params), servers, options
    # A drafter on this machine's MLX (mixed mode) has a folder; one on a server, an address.
    drafters = tuple(
        local_model(name, "drafter", m)
        if m.get("backend") == "mlx"
        else ModelConfig(name, "drafter", "server", server_root(m["source"]))
        for name, m in models.items()
    )
    options = VllmOptions(
        top_logprobs=int(backend.get("top_logprobs", 20)),
        strategy=backend.get("verify_strategy", "auto"),
        exact_correction=bool(backend.get("exact_correction")),
    )
    return ModelConfig(TARGET, "target", "server", server_root(target["source"])), drafters, options


def local_model(name: str, role: Role, model: Mapping[str, Any]) -> ModelConfig:
    """A model this machine ran, from its identity: a folder (saved absolute), the GGUF file it was
    converted from, or a drafter made from no model or from the target, with its parameters (its
    kind reads the record back)."""
    try:
        return replay_model(name, role, model)
    except ConfigError as exc:
        raise SessionError(exc.detail) from None
