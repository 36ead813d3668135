"""Flags shared by the commands that run models, and their translation into engine settings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from specplay.engine.settings import AUTO_ROUTE, MODES, POLICIES, PolicyParams, SamplingParams, SpecSettings
from specplay.errors import ConfigError

_FLAG_OF_FIELD = {"tv_budget": "--tv", "draft": "--draft"}


def flag_of(field: str) -> str:
    return _FLAG_OF_FIELD.get(field, "--" + field.replace("_", "-"))


def config_error_line(error: ConfigError) -> str:
    return f"{flag_of(error.field)} {error.detail}"


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """--target and --draft; both left out means the shipped demo models (see use_demo_models)."""
    group = parser.add_argument_group("models (default: the shipped demo target with drafters base and prose)")
    group.add_argument("--target", metavar="PATH|ID", help="target model: mlx-lm folder or cached Hugging Face id")
    group.add_argument(
        "--draft",
        metavar="[NAME=]PATH|ID",
        action="append",
        default=[],
        help="a drafter; repeat for a mixture of speculators (named after its folder unless NAME= is given)",
    )


def add_prompt_flags(parser: argparse.ArgumentParser, required: bool = True) -> None:
    group = parser.add_argument_group("prompt")
    source = group.add_mutually_exclusive_group(required=required)
    source.add_argument("--prompt", metavar="TEXT")
    source.add_argument("--prompt-file", metavar="F", type=Path)
    group.add_argument("--raw", action="store_true", help="encode the prompt as written, without the chat template")


def add_decoding_flags(parser: argparse.ArgumentParser) -> None:
    spec = parser.add_argument_group("speculative decoding (live in the playground)")
    spec.add_argument("--mode", choices=MODES, default="speculative")
    spec.add_argument("--k", type=int, default=4, help="draft length, or the starting one for an adaptive policy")
    spec.add_argument("--policy", choices=POLICIES, default="fixed")
    spec.add_argument(
        "--route", default=AUTO_ROUTE, metavar="NAME|auto", help="pin a drafter, or let the router choose"
    )
    spec.add_argument(
        "--tv",
        type=float,
        default=0.0,
        metavar="D",
        help="TV budget of mentored decoding: 0 lossless, 1 accepts every draft",
    )
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    sampling.add_argument("--top-p", type=float, default=1.0)
    sampling.add_argument("--top-k", type=int, default=0)
    sampling.add_argument("--min-p", type=float, default=0.0)
    sampling.add_argument("--seed", type=int, default=0)
    policy = parser.add_argument_group("draft-length policies and router")
    defaults = PolicyParams()
    policy.add_argument("--k-min", type=int, default=defaults.k_min)
    policy.add_argument("--k-max", type=int, default=defaults.k_max)
    policy.add_argument(
        "--low-acceptance", type=float, default=defaults.low_acceptance, help="acceptance-rate: k-1 below"
    )
    policy.add_argument(
        "--high-acceptance", type=float, default=defaults.high_acceptance, help="acceptance-rate: k+1 above"
    )
    policy.add_argument("--ema-alpha", type=float, default=defaults.ema_alpha, help="accepted-length: EMA weight")
    policy.add_argument(
        "--confidence-threshold",
        type=float,
        default=defaults.confidence_threshold,
        help="confidence: stop drafting when the estimated chance of a rejection exceeds this",
    )
    policy.add_argument(
        "--route-map",
        metavar="CLASS=NAME",
        action="append",
        default=[],
        help="send a router class (code, prose) to a drafter",
    )


def add_sessions_dir_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--sessions-dir", metavar="DIR", help="where sessions live (default: $SPECPLAY_SESSIONS_DIR, else ./sessions)"
    )


def settings_from(args: argparse.Namespace) -> SpecSettings:
    """Validated settings; a bad value raises ConfigError naming its field."""
    return SpecSettings(
        k=args.k,
        policy=args.policy,
        route=args.route,
        tv_budget=args.tv,
        sampling=SamplingParams(args.temperature, args.top_p, args.top_k, args.min_p),
        policy_params=PolicyParams(
            args.k_min, args.k_max, args.low_acceptance, args.high_acceptance, args.ema_alpha, args.confidence_threshold
        ),
    )


def _pairs(values: list[str], field: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise ConfigError(field, f"takes {what} (got {value!r})")
        pairs.append((name, rest))
    return pairs


def comma_floats(text: str, field: str, what: str) -> list[float]:
    """A comma-separated list of numbers, or a ConfigError saying what the flag takes."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(field, f"takes {what} separated by commas (got {text!r})") from None


def drafters_from(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(name, model) pairs; a drafter without NAME= is named after its folder."""
    named = []
    for value in args.draft:
        name, sep, spec = value.partition("=")
        if not sep or "/" in name:  # an unnamed path may itself contain '='
            name, spec = Path(value.rstrip("/")).name, value
        named.append((name, spec))
    check_drafter_names([name for name, _ in named])
    return named


def check_drafter_names(names: list[str]) -> None:
    for name in names:
        if names.count(name) > 1:
            raise ConfigError("draft", f"names {name!r} twice; give each drafter its own NAME=")
        if name == "target":
            raise ConfigError("draft", "cannot name a drafter 'target'; name it with NAME=")


def use_demo_models(args: argparse.Namespace) -> None:
    """No --target and no --draft: run on the demo models that ship inside specplay."""
    if getattr(args, "target", None) is not None or args.draft:
        if getattr(args, "target", None) is None and not getattr(args, "target_url", None):
            raise ConfigError("target", "is needed with --draft (or leave out both to use the demo models)")
        return
    from specplay.config.demo import demo_model_paths

    target, drafters = demo_model_paths()
    args.target = str(target)
    args.draft = [f"{name}={path}" for name, path in drafters.items()]


def route_map_from(args: argparse.Namespace) -> dict[str, str]:
    return dict(_pairs(args.route_map, "route_map", "CLASS=NAME"))


def prompt_from(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    path: Path = args.prompt_file
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("prompt_file", f"{str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("prompt_file", f"{str(path)!r} cannot be read: {exc}") from None


def warn(message: str) -> None:
    print(f"specplay: warning: {message}", file=sys.stderr)
