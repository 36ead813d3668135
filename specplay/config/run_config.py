"""The configuration of a run: which models, on which backend, the request, the live settings.

Built once at a command's edge (from flags, or from a saved session merged with flags) and
handed down as it is: below the commands no code sees a flag. `check` validates it with the
same one-line errors the flags would give, before anything loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specplay.config.capabilities import NATIVE_FIXED, capabilities_of
from specplay.drafters import EarlierOutputs, cannot_write, kind_of
from specplay.drafters.model import check_found
from specplay.drafters.model_config import ModelConfig
from specplay.engine.capabilities import check_supported
from specplay.engine.routers.routing import CodeProseRouter, Router, check_route, check_route_map
from specplay.engine.settings import NONE_ROUTE, RESERVED_ROUTES, Mode, SpecSettings
from specplay.errors import ConfigError

BackendKind = Literal["mlx", "vllm"]
BACKENDS: tuple[BackendKind, ...] = ("mlx", "vllm")
Strategy = Literal["auto", "prompt-logprobs", "prefixes"]
STRATEGIES: tuple[Strategy, ...] = ("auto", "prompt-logprobs", "prefixes")
TARGET = "target"


@dataclass(frozen=True, slots=True)
class VllmOptions:
    """How to talk to vLLM servers (`backend` vllm)."""

    api_key: str | None = field(default=None, repr=False)
    """Sent as a bearer token; never written to a session, a log or a repr."""
    top_logprobs: int = 20
    strategy: Strategy = "auto"
    exact_correction: bool = False
    native: bool = False
    """The servers speculate themselves; specplay watches (k, drafter and rule are theirs)."""
    baseline_url: str | None = None
    """Native mode: a plain server of the same target, for the target-only lane."""
    timeout_s: float = 60.0
    key_withheld: bool = False
    """A key was given but not sent: the servers came from a session file, not the command line."""
    logins: tuple[tuple[str, tuple[str, str]], ...] = field(default=(), repr=False)
    """(server root, (user, password)) for addresses that held credentials; never written anywhere."""


@dataclass(frozen=True, slots=True)
class RequestConfig:
    """What one generation asks for, as the user gave it (the engine's Request holds token ids)."""

    prompt: str | None = None
    """None where a command has none yet (the playground's prompt is typed in); a conversation's first turn."""
    raw: bool = False
    """Encode the prompt as written, without the chat template."""
    mode: Mode = "speculative"
    seed: int = 0
    max_tokens: int = 256
    ignore_eos: bool = False
    follow_ups: tuple[str, ...] = ()
    """A conversation's later turns, in order (`run --prompt` given more than once): each lane
    answers each after its own earlier answers."""

    @property
    def prompts(self) -> tuple[str, ...]:
        """Every turn's prompt, in order: none before a prompt is given."""
        return () if self.prompt is None else (self.prompt, *self.follow_ups)

    @property
    def prompt_format(self) -> str:
        """How the prompt becomes tokens, as every report says it (one workload: run, the
        playground, bench, costs and fidelity all encode alike)."""
        return prompt_format(self.raw)


def prompt_format(raw: bool) -> str:
    """The words for how a prompt became tokens (`RequestConfig.prompt_format`; sessions record `raw`)."""
    return "raw (as written: --raw)" if raw else "the model's chat template, where it has one"


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """A learned router file (`--router FILE`, written by `specplay router train`), read at the
    command's edge (router_training/router_file.py): what `--route auto` asks instead of the heuristic."""

    path: Path
    sha256: str
    """Of the file's bytes: sessions record it, so a session says which router chose its route."""
    drafters: tuple[str, ...]
    """The drafters it was trained for: its classes."""
    router: Router = field(compare=False, repr=False)
    fallback_map: Mapping[str, str] = field(default_factory=dict)
    """Where the router is unsure the heuristic chooses: this is its route map (the model set's or
    the base's, over the heuristic's classes), and `fallback_notes` say why, where they do."""
    fallback_notes: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What a session records of it."""
        return {"file": self.path.name, "sha256": self.sha256, "drafters": list(self.drafters)}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    target: ModelConfig
    drafters: tuple[ModelConfig, ...]
    backend: BackendKind = "mlx"
    vllm: VllmOptions = field(default_factory=VllmOptions)
    request: RequestConfig = field(default_factory=RequestConfig)
    settings: SpecSettings = field(default_factory=SpecSettings)
    """The live settings a run starts with."""
    route_map: Mapping[str, str] = field(default_factory=dict)
    """Router class to drafter (or `none`); classes it leaves out go to their default drafter."""
    route_notes: Mapping[str, str] = field(default_factory=dict)
    """Why the map sends a class where it does, where the model set or the recorded sessions say
    ("exit measured 0.34× here"): what `--route auto` says with its choice."""
    router: RouterConfig | None = None
    """The learned router `--route auto` uses; None: the heuristic (CodeProseRouter)."""
    sessions_dir: Path = Path("sessions")
    earlier_outputs: EarlierOutputs | None = field(default=None, compare=False, repr=False)
    """The target's earlier outputs the command read from `sessions_dir` as it started, for the
    drafters that remember (drafters/memory.py); None where no drafter asks for them."""

    @property
    def drafter_names(self) -> tuple[str, ...]:
        """The routes: drafters, or in native mode every speculating server, the target's first."""
        names = tuple(d.name for d in self.drafters)
        return (self.target.params.get("route", NATIVE_ROUTE), *names) if self.vllm.native else names

    def drafter(self, name: str) -> ModelConfig:
        """The drafter (or, in native mode, the speculating server) a route names."""
        if self.native and name == self.drafter_names[0]:
            return self.target
        return next(d for d in self.drafters if d.name == name)

    @property
    def native(self) -> bool:
        return self.backend == "vllm" and self.vllm.native

    @property
    def local_models(self) -> tuple[ModelConfig, ...]:
        """The models whose weights this machine loads (with MLX)."""
        return tuple(m for m in (self.target, *self.drafters) if m.local)


NATIVE_ROUTE = "server"
"""The route name of a speculating server given without one (`--target-url URL`)."""


def check(config: RunConfig) -> None:
    """Everything that can be checked before a model loads; a ConfigError names the field."""
    check_models(config)
    check_router(config)
    names = config.drafter_names
    if names:
        check_route(config.settings.route, names)
        check_route_map(config.route_map, route_classes(config), names)
    elif config.route_map:
        raise ConfigError("route_map", "needs drafters to route to")
    if config.request.seed < 0:
        raise ConfigError("seed", f"must be 0 or more (got {config.request.seed})")
    if config.request.max_tokens < 1:
        raise ConfigError("max_tokens", f"must be at least 1 (got {config.request.max_tokens})")
    # `--route none` drafts nothing: its speculative lane is the target's own steps, no drafter needed.
    drafts = config.request.mode == "draft" or config.settings.route != NONE_ROUTE
    if config.request.mode != "target" and drafts and not names:
        raise ConfigError("draft", f"is needed in {config.request.mode} mode: give at least one drafter")
    pinned = config.settings.route
    if config.request.mode == "draft" and (why := cannot_write(pinned, config.drafters)) is not None:
        raise ConfigError("mode", f"draft cannot run on {pinned!r}: {why}")
    if config.native:
        if not config.settings.acceptance_rule.lossless or config.settings.policy != "fixed":
            raise ConfigError("vllm_native", f"cannot relax the acceptance rule or change the policy: {NATIVE_FIXED}")
        if config.request.mode == "draft":
            raise ConfigError("mode", f"draft cannot run in native mode: {NATIVE_FIXED}")


def remembering(config: RunConfig) -> tuple[str, ...]:
    """The drafters whose kind reads earlier outputs as the command starts (drafters/memory.py)."""
    return tuple(d.name for d in config.drafters if kind_of(d).recalls(d) > 0)


def remembered_line(config: RunConfig) -> str | None:
    """What the command read for the drafters that remember, one line for the terminal."""
    names = remembering(config)
    if not names or config.earlier_outputs is None:
        return None
    return f"{' and '.join(names)}: {config.earlier_outputs.describe()}"


def route_classes(config: RunConfig) -> tuple[str, ...]:
    """The classes of the router `--route auto` asks: a learned router's are its drafters."""
    return config.router.drafters if config.router is not None else CodeProseRouter.classes


def check_router(config: RunConfig) -> None:
    """A learned router routes between the drafters it was trained for, and only those."""
    if config.router is None:
        return
    names = config.drafter_names
    if not names:
        raise ConfigError("router", "needs drafters to route to")
    if set(config.router.drafters) != set(names):
        raise ConfigError(
            "router",
            f"{str(config.router.path)!r} was trained for drafters {', '.join(config.router.drafters)}, and this "
            f"run's are {', '.join(names)}: train it again on sessions of these drafters "
            "(specplay router train SESSION|DIR --out FILE)",
        )


def _check_found(models: tuple[ModelConfig, ...]) -> None:
    """Local models are where their specs say, in the order given, before anything loads."""
    for model in models:
        check_found("target" if model.role == "target" else "draft", model.kind, model.location)


def check_models(config: RunConfig) -> None:
    """The models make sense for the backend (local ones on MLX, a target server for vLLM), and
    the backend can judge the rule and counterfactual routes asked for."""
    check_supported(config.settings, capabilities_of(config))
    names = [d.name for d in config.drafters]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError("draft", f"names {name!r} twice; give each drafter its own NAME=")
        if name == TARGET:
            raise ConfigError("draft", "cannot name a drafter 'target'; name it with NAME=")
        if name in RESERVED_ROUTES:
            raise ConfigError("draft", f"cannot name a drafter {name!r}, a route setting; name it with NAME=")
    # The vLLM numbers are checked whatever the backend: a NaN is a mistake even where it is unused.
    if config.vllm.top_logprobs < 1:
        raise ConfigError("top_logprobs", f"must be at least 1 (got {config.vllm.top_logprobs})")
    if not 0 < config.vllm.timeout_s < math.inf:  # also refuses NaN
        raise ConfigError("timeout", f"must be a finite number of seconds above 0 (got {config.vllm.timeout_s})")
    for model in (config.target, *config.drafters):
        kind_of(model).check_backend(model, config.backend)
    if config.backend == "mlx":
        if config.vllm.native or config.vllm.baseline_url:
            flag = "vllm_native" if config.vllm.native else "baseline_url"
            raise ConfigError(flag, "is for vLLM servers: add --backend vllm, or drop it")
        _check_found(config.local_models)
        return
    if not config.target.on_server:
        raise ConfigError("target", "is for local models; with --backend vllm give --target-url URL")
    _check_found(config.local_models)
    options = config.vllm
    if options.native and any(not d.on_server for d in config.drafters):
        raise ConfigError(
            "vllm_native", "uses each server's own drafter; drop --draft (--draft-url adds a speculating server)"
        )
    if options.native and config.target.params.get("route") in names:
        raise ConfigError("draft_url", f"names {config.target.params['route']!r} twice; give each server its own NAME=")
