"""Flags to a RunConfig: the one place a command's flags become its configuration.

`given(args)` keeps only the flags the user typed; `run_config` lays them over a base, the
defaults or a saved session's configuration (`--replay`, `--open`). Model flags replace the
base's models as a whole; every other flag replaces its one value.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from specplay.cli.flags import API_KEY_ENV
from specplay.config.api_key import checked_key
from specplay.config.capabilities import capabilities_of
from specplay.config.model_sets import ModelSet, default_set, named_set
from specplay.config.run_config import (
    TARGET,
    BackendKind,
    ModelConfig,
    RouterConfig,
    RunConfig,
    VllmOptions,
    check_router,
    route_classes,
)
from specplay.config.urls import credentials, named_url, server_root, url_of
from specplay.drafters import kind_of, parse_model
from specplay.engine.capabilities import no_trees
from specplay.engine.routers.routing import CodeProseRouter, check_route_map
from specplay.engine.rules import LOSSLESS, Mentored, RuleParams
from specplay.engine.settings import AUTO_ROUTE, GROUPS, TREE_WIDTH, PolicyParams, SamplingParams, SpecSettings
from specplay.errors import ConfigError
from specplay.files.inputs import PROMPT_LIMIT, read_input_text
from specplay.router_training.evidence import with_route_evidence
from specplay.router_training.router_file import read_router
from specplay.store.format import Session
from specplay.store.location import sessions_dir
from specplay.store.recall import earlier_outputs
from specplay.store.replay import session_config

MODEL_FLAGS = ("backend", "target", "draft", "target_url", "draft_url", "vllm_native", "baseline_url")
_OWN_FLAGS = tuple(name for name in SpecSettings.__dataclass_fields__ if name not in GROUPS)
"""The settings of their own (k, policy, route, rule, counterfactual): each flag is its field's name."""
_SAMPLING_FLAGS = tuple(SamplingParams.__dataclass_fields__)
_POLICY_FLAGS = tuple(PolicyParams.__dataclass_fields__)
_RULE_FLAGS = tuple(RuleParams.__dataclass_fields__)
_REQUEST_FLAGS = ("raw", "mode", "seed", "max_tokens", "ignore_eos")
_VLLM_FLAGS = {
    "top_logprobs": "top_logprobs",
    "vllm_strategy": "strategy",
    "vllm_exact_correction": "exact_correction",
    "timeout": "timeout_s",
}


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The flags the user gave (the shared flags have no argparse default; a None default is not
    given either), command plumbing left out."""
    return {k: v for k, v in vars(args).items() if v is not None and k not in ("command", "argv")}


def run_config(flags: Mapping[str, Any], base: RunConfig | None = None) -> RunConfig:
    """`flags` (from `given`) over `base`; with neither model flags nor a base, the default model set
    (model_sets.default_set: SmolLM2 once fetched, else the demo models)."""
    new_models = base is None or any(name in flags for name in MODEL_FLAGS)
    opened_with: ModelSet | None = None
    if new_models:
        backend, target, drafters, vllm = models_from(flags)
        opened_with = model_set_for(flags)
    else:
        assert base is not None
        backend, target, drafters, vllm = base.backend, base.target, base.drafters, base.vllm
    # The key goes only to servers named on this command line: a session file's servers (a shared
    # session could name a host that collects keys) are reached without it.
    key = api_key_for(flags, backend)
    withheld = key is not None and not new_models
    vllm = replace(
        vllm,
        api_key=None if withheld else key,
        key_withheld=withheld,
        **{field: flags[flag] for flag, field in _VLLM_FLAGS.items() if flag in flags},
    )
    start = base or RunConfig(target=target, drafters=drafters)
    request = replace(start.request, **{name: flags[name] for name in _REQUEST_FLAGS if name in flags})
    if "prompt" in flags or "prompt_file" in flags:
        first, *later = prompts_from(flags)
        request = replace(request, prompt=first, follow_ups=tuple(later))
    settings = settings_from(flags, start.settings)
    router = router_from(flags)
    user_map = {} if new_models else dict(start.route_map)  # a base's map names the base's drafters
    notes = {} if new_models else dict(start.route_notes)
    if opened_with is not None:
        user_map, notes = dict(opened_with.route_map), dict(opened_with.route_notes)
    # A base's or a model set's map names the classes of the router it was made for: a learned
    # router's classes are drafters, the heuristic's code and prose. Those of another router go.
    classes = router.drafters if router is not None else CodeProseRouter.classes
    if router is not None:  # the heuristic's map stays, for the prompts the router is unsure of
        router = replace(
            router,
            fallback_map={c: d for c, d in user_map.items() if c in CodeProseRouter.classes},
            fallback_notes={c: n for c, n in notes.items() if c in CodeProseRouter.classes},
        )
    user_map = {cls: drafter for cls, drafter in user_map.items() if cls in classes}
    if "route_map" in flags:  # class by class, over the set's or the base's map
        user_map |= dict(pairs(flags["route_map"], "route_map", "CLASS=NAME"))
    # A note says why the set sent a class where it did: where the user sent it elsewhere, it goes.
    set_map = opened_with.route_map if opened_with is not None else start.route_map
    notes = {cls: note for cls, note in notes.items() if user_map.get(cls) == set_map.get(cls)}
    config = RunConfig(
        target=target,
        drafters=drafters,
        backend=backend,
        vllm=vllm,
        request=request,
        settings=settings,
        route_map=user_map,
        route_notes=notes,
        router=router,
        sessions_dir=sessions_dir_from(flags),
    )
    if tree_alone(flags, start.settings) and (why := no_trees(capabilities_of(config))) is not None:
        # The width came from --tree, not from the user: the line names the flag they gave.
        nodes = flags["tree_nodes"]
        raise ConfigError(
            "tree",
            f"{nodes} alone drafts a tree of width {TREE_WIDTH}, and draft trees cannot run here: {why}; "
            f"give --width 1 --tree {nodes} for chains of at most {nodes} drafts, or use the MLX backend",
        )
    pinned = settings.route != AUTO_ROUTE and "route" not in flags
    if new_models and pinned and settings.route not in config.drafter_names:
        config = replace(config, settings=replace(settings, route=AUTO_ROUTE))  # the base's drafter is gone
    check_router(config)
    # Checked here, kept as given: the run sends the classes it leaves out to their default drafter
    # (route_map_for), so it can say which class the map named and which it defaulted.
    if config.drafter_names:
        check_route_map(config.route_map, route_classes(config), config.drafter_names)
    return with_earlier_outputs(config)


def with_earlier_outputs(config: RunConfig) -> RunConfig:
    """The target's earlier outputs in the sessions folder, read once now for the drafters that
    remember (at most the most tokens any of them holds); the configuration as it was where none does."""
    wanted = max((kind_of(d).recalls(d) for d in config.drafters), default=0)
    if not wanted or config.backend != "mlx":
        return config
    return replace(config, earlier_outputs=earlier_outputs(config.sessions_dir, config.target, wanted))


def with_recorded_routes(config: RunConfig, flags: Mapping[str, Any]) -> RunConfig:
    """A new run's route map after the sessions recorded here (router_training/evidence.py): a class
    whose drafter measured below target-only speed goes to none, unless this command line's
    --route-map names the class."""
    named = {cls for cls, _ in pairs(flags.get("route_map", []), "route_map", "CLASS=NAME")}
    return with_route_evidence(config, named)


def router_from(flags: Mapping[str, Any]) -> RouterConfig | None:
    """--router FILE, read and checked now, before any model loads (whether it fits the run's
    drafters: check_router)."""
    if "router" not in flags:
        return None
    return read_router(path_flag(flags["router"], "router"))


def api_key_for(flags: Mapping[str, Any], backend: BackendKind) -> str | None:
    """The API key for vLLM servers: --api-key, else $SPECPLAY_API_KEY, checked."""
    if backend != "vllm":
        return None  # MLX sends nothing anywhere: a key set for other runs is no concern here
    return checked_key(flags.get("api_key"), "--api-key") or checked_key(os.environ.get(API_KEY_ENV), f"${API_KEY_ENV}")


def path_flag(value: str, field: str) -> Path:
    """A file or folder flag's value; an empty one (which Path would read as ".") is refused."""
    if not value.strip():
        raise ConfigError(field, "is empty: give a file or folder name")
    return Path(value).expanduser()


def replay_base(session: Session, flags: Mapping[str, Any]) -> RunConfig:
    """A saved session's configuration, under the models the flags name if they name any (then a
    session whose models cannot be read still replays)."""
    return session_config(session, models_from(flags) if any(name in flags for name in MODEL_FLAGS) else None)


def sessions_dir_from(flags: Mapping[str, Any]) -> Path:
    """--sessions-dir, else $SPECPLAY_SESSIONS_DIR, else ./sessions (a session's own folder never counts)."""
    return sessions_dir(flags.get("sessions_dir"))


def settings_from(flags: Mapping[str, Any], base: SpecSettings) -> SpecSettings:
    """The live settings the flags give over `base`; a bad value raises ConfigError naming its field."""
    sampling = replace(base.sampling, **{name: flags[name] for name in _SAMPLING_FLAGS if name in flags})
    policy = replace(base.policy_params, **{name: flags[name] for name in _POLICY_FLAGS if name in flags})
    rules = replace(base.rule_params, **{name: flags[name] for name in _RULE_FLAGS if name in flags})
    own = {name: flags[name] for name in _OWN_FLAGS if name in flags}
    if tree_alone(flags, base):
        own["width"] = TREE_WIDTH
    if own.get("rule") == LOSSLESS:
        own["rule"], rules = Mentored.name, _lossless(flags, rules)
    return replace(base, sampling=sampling, policy_params=policy, rule_params=rules, **own)


def tree_alone(flags: Mapping[str, Any], base: SpecSettings) -> bool:
    """`--tree N` without --width over a chain: it asks for a tree, of width TREE_WIDTH."""
    return "tree_nodes" in flags and "width" not in flags and base.width == 1


def _lossless(flags: Mapping[str, Any], rules: RuleParams) -> RuleParams:
    """`--rule lossless`: mentored decoding with its knob at the lossless end; a knob flag that
    says otherwise is one line rather than a rule that is not what was named."""
    knob = Mentored.knob
    field, flag = knob.setting.field, knob.setting.flag
    if field in flags and flags[field] != knob.lossless:
        raise ConfigError("rule", f"lossless keeps {flag} at {knob.lossless:g}: drop {flag}, or give --rule mentored")
    return replace(rules, **{field: knob.lossless})


def model_set_for(flags: Mapping[str, Any]) -> ModelSet | None:
    """The model set the flags ask for: none named, the default one (SmolLM2 once fetched, else the
    demo models); `--target demo` or a catalog name without --draft, that set."""
    if flags.get("backend", "mlx") != "mlx" or any(name in flags for name in ("draft", "draft_url", "target_url")):
        return None
    if "target" not in flags:
        return default_set()
    return named_set(flags["target"])


def models_from(flags: Mapping[str, Any]) -> tuple[BackendKind, ModelConfig, tuple[ModelConfig, ...], VllmOptions]:
    """(backend, target, drafters, vLLM options) from the model flags; none at all: the default
    model set (model_sets.py)."""
    backend: BackendKind = flags.get("backend", "mlx")
    local = tuple(parse_model(name, "drafter", written, "draft") for name, written in named_drafters(flags))
    remote = tuple(
        ModelConfig(name or f"draft{i + 1}", "drafter", "server", url)
        for i, (name, url) in enumerate(named_url(value) for value in flags.get("draft_url", []))
    )
    native = bool(flags.get("vllm_native"))
    opened_with = model_set_for(flags)
    if opened_with is not None:
        target, local = opened_with.target, opened_with.drafters
    # Given both --target and --target-url, take the one this backend cannot run: check_models
    # then refuses it with its one line, as it refuses any model the backend cannot take.
    elif "target_url" in flags and (backend == "mlx" or "target" not in flags):
        if native:  # speculating servers are routed to by name, as drafters are
            route, root = named_url(flags["target_url"], "target_url")
            target = ModelConfig(TARGET, "target", "server", root, {"route": route} if route else {})
        else:
            target = ModelConfig(TARGET, "target", "server", server_root(flags["target_url"]))
    elif "target" in flags:
        target = named_target(flags["target"])
    elif backend == "vllm":
        raise ConfigError("target_url", "is required with --backend vllm (e.g. http://gpu-box:8000/v1)")
    else:
        raise ConfigError(
            "target", "is needed with --draft (or leave out both: SmolLM2 once fetched, else the demo models)"
        )
    baseline = server_root(flags["baseline_url"], "baseline_url") if "baseline_url" in flags else None
    urls = [flags.get("target_url"), *flags.get("draft_url", []), flags.get("baseline_url")]
    logins = tuple((server_root(url_of(v)), login) for v in urls if v and (login := credentials(url_of(v))))
    return backend, target, (*remote, *local), VllmOptions(native=native, baseline_url=baseline, logins=logins)


def named_target(written: str) -> ModelConfig:
    """--target MODEL with drafters of the user's own: a model set's name means its target."""
    named = named_set(written)
    return named.target if named is not None else parse_model(TARGET, "target", written, "target")


def named_drafters(flags: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, the value as written) of each --draft; a drafter without NAME= is named after its folder or file
    (a built-in drafter after its kind)."""
    named = []
    for value in flags.get("draft", []):
        name, sep, written = value.partition("=")
        if not sep or "/" in name or ":" in name:  # an unnamed path or built-in may itself contain '='
            name, written = Path(value.split(":")[0].rstrip("/")).name.removesuffix(".gguf"), value
        named.append((name, written))
    return named


def pairs(values: list[str], field: str, what: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise ConfigError(field, f"takes {what} (got {value!r})")
        out.append((name, rest))
    return out


def comma_floats(text: str, field: str, what: str) -> list[float]:
    """A comma-separated list of numbers, or a ConfigError saying what the flag takes."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(field, f"takes {what} separated by commas (got {text!r})") from None


def prompts_from(flags: Mapping[str, Any]) -> tuple[str, ...]:
    """The prompts given: --prompt (given several times to `run`, a conversation's turns), or the
    text of --prompt-file."""
    if "prompt" in flags:
        prompt = flags["prompt"]
        return tuple(prompt) if isinstance(prompt, list) else (prompt,)
    return (read_input_text(flags["prompt_file"], "--prompt-file", PROMPT_LIMIT),)
