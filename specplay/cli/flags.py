"""The flags shared by the commands that run models. Parsing only: `configure.py` turns them into
a RunConfig. These flags have no argparse default, so a command knows which ones the user gave
(a session's settings apply where the user gave none); the defaults live in the configuration."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from specplay.config.controls import CONTROL
from specplay.config.numbers import count_number, seed_number
from specplay.config.run_config import BACKENDS, STRATEGIES, RequestSpec, VllmOptions
from specplay.drafters import drafter_syntax
from specplay.engine.rules import RULE_NAMES, RULES, RuleParams, all_settings
from specplay.engine.settings import (
    MODES,
    NONE_ROUTE,
    POLICIES,
    PolicyParams,
    SamplingParams,
    SpecSettings,
)

UNSET = argparse.SUPPRESS
API_KEY_ENV = "SPECPLAY_API_KEY"


SECRET_FLAGS = ("--api-key",)


def secrets_in(argv: list[str]) -> tuple[str, ...]:
    """The values of the secret flags in `argv` (`--api-key KEY` or `--api-key=KEY`)."""
    found = []
    for i, arg in enumerate(argv):
        for flag in SECRET_FLAGS:
            if arg == flag and i + 1 < len(argv):
                found.append(argv[i + 1])
            elif arg.startswith(flag + "="):
                found.append(arg.split("=", 1)[1])
    return tuple(secret for secret in found if secret)


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line, without the usage block, and bounds every
    integer flag by its kind (a seed, or a count) before any command sees it."""

    _secrets: tuple[str, ...] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        self._secrets = secrets_in(argv)
        return super().parse_known_args(argv, namespace)

    def error(self, message: str) -> NoReturn:
        # argparse quotes what it could not place ("unrecognized arguments: --api-key sk-…"):
        # a key given to a command that takes none must not be printed.
        for secret in self._secrets:
            message = message.replace(secret, "<hidden>")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        if action.type is not int:
            return super()._get_value(action, arg_string)
        try:
            return seed_number(arg_string) if action.dest == "seed" else count_number(arg_string)
        except ValueError as error:
            raise argparse.ArgumentError(action, str(error)) from None


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models (default: the shipped demo target with drafters base and prose)")
    group.add_argument(
        "--target",
        metavar="MODEL",
        default=UNSET,
        help="target model: an mlx-lm folder, a cached Hugging Face id, a .gguf file or a fetched name (smollm2)",
    )
    group.add_argument(
        "--draft",
        metavar="[NAME=]MODEL",
        action="append",
        default=UNSET,
        help=f"a drafter: a model as for --target, {drafter_syntax()}; "
        "repeat for a mixture of speculators (named after its model unless NAME= is given)",
    )


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    defaults = VllmOptions()
    group = parser.add_argument_group("backend (--backend vllm drives vLLM servers on a GPU box)")
    group.add_argument("--backend", choices=BACKENDS, default=UNSET, help="where the models run (default mlx)")
    group.add_argument(
        "--target-url",
        metavar="[NAME=]URL",
        default=UNSET,
        help="vllm: the target's server, e.g. http://gpu-box:8000/v1 or its root (NAME=: its route in native mode)",
    )
    group.add_argument(
        "--draft-url",
        metavar="[NAME=]URL",
        action="append",
        default=UNSET,
        help="vllm: a drafter's server; repeat for several (--draft NAME=PATH adds a local MLX drafter)",
    )
    group.add_argument("--api-key", metavar="KEY", default=UNSET, help=f"vllm: bearer token (default ${API_KEY_ENV})")
    group.add_argument(
        "--top-logprobs",
        type=int,
        default=UNSET,
        metavar="K",
        help=f"vllm: top-K logprobs per position (default {defaults.top_logprobs}, the server's cap)",
    )
    group.add_argument(
        "--vllm-strategy",
        choices=STRATEGIES,
        default=UNSET,
        help="vllm: verify with prompt_logprobs, or with the k+1 prefixes (keeps the prefix cache); "
        "auto (the default) picks by context length",
    )
    group.add_argument(
        "--vllm-exact-correction",
        action="store_true",
        default=UNSET,
        help="vllm: draw each correction exactly, by rejection from the target's samples at T > 0 "
        "(extra requests at rejected positions only)",
    )
    group.add_argument(
        "--vllm-native",
        action="store_true",
        default=UNSET,
        help="vllm: let the target's server speculate itself (--speculative-config) and watch",
    )
    group.add_argument(
        "--baseline-url",
        metavar="URL",
        default=UNSET,
        help="vllm native, playground: a plain server of the same target, for the target-only lane",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=UNSET,
        metavar="S",
        help=f"vllm: seconds a whole reply may take, a stream included (default {defaults.timeout_s:g})",
    )


def add_prompt_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("prompt")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--prompt", metavar="TEXT", default=UNSET)
    source.add_argument("--prompt-file", metavar="F", type=Path, default=UNSET)
    add_raw_flag(group)


def add_raw_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--raw",
        action="store_true",
        default=UNSET,
        help="encode the prompt as written, without the chat template",
    )


def add_output_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    request = RequestSpec()
    parser.add_argument(
        "--max-tokens", type=int, default=UNSET, help=f"tokens to generate at most (default {request.max_tokens})"
    )
    parser.add_argument(
        "--ignore-eos", action="store_true", default=UNSET, help="generate --max-tokens tokens whatever comes"
    )


def add_decoding_flags(parser: argparse.ArgumentParser, rule_list: bool = False) -> None:
    """`rule_list`: --rule takes several rules, comma-separated (a sweep runs each)."""
    settings = SpecSettings()
    spec = parser.add_argument_group("speculative decoding (live in the playground)")
    spec.add_argument("--mode", choices=MODES, default=UNSET, help="speculative (the default), target or draft")
    spec.add_argument(
        "--k",
        type=int,
        default=UNSET,
        help=f"draft length: {CONTROL['k'].words} (default {settings.k})",
    )
    spec.add_argument(
        "--policy", choices=POLICIES, default=UNSET, help=f"{CONTROL['policy'].words} (default {settings.policy})"
    )
    spec.add_argument(
        "--width",
        type=int,
        default=UNSET,
        metavar="B",
        help=f"{CONTROL['width'].words} (default {settings.width}; 2 with --tree); k is the tree's depth",
    )
    spec.add_argument(
        "--tree",
        dest="tree_nodes",
        type=int,
        default=UNSET,
        metavar="N",
        help="draft a tree of N nodes at most, the verify pass's rows but one (default: width x k)",
    )
    spec.add_argument(
        "--route",
        default=UNSET,
        metavar="NAME|auto|adaptive|none",
        help=f"{CONTROL['route'].words} (default {settings.route})",
    )
    rule_help = f"{CONTROL['rule'].words}; " + ", ".join(f"{name} ({rule.description})" for name, rule in RULES.items())
    rule_help += f"; each keeps what lossless acceptance keeps, and more (default {settings.rule})"
    if rule_list:
        spec.add_argument("--rule", default=UNSET, metavar="RULE[,RULE...]", help=rule_help + "; or all")
    else:
        spec.add_argument("--rule", choices=RULE_NAMES, default=UNSET, help=rule_help)
    defaults = RuleParams()
    for setting in all_settings():
        default = getattr(defaults, setting.field)
        spec.add_argument(
            setting.flag,
            dest=setting.field,
            type=float,
            default=UNSET,
            metavar=setting.metavar,
            help=setting.help if default is None else f"{setting.help} (default {default:g})",
        )
    spec.add_argument(
        "--counterfactual",
        action="store_true",
        default=UNSET,
        help=f"{CONTROL['counterfactual'].words}; its cost is reported apart",
    )
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--temperature", type=float, default=UNSET, help=CONTROL["temperature"].words)
    sampling.add_argument("--top-p", type=float, default=UNSET, help=f"(default {SamplingParams().top_p:g}: off)")
    sampling.add_argument("--top-k", type=int, default=UNSET, help=f"(default {SamplingParams().top_k}: off)")
    sampling.add_argument("--min-p", type=float, default=UNSET, help=f"(default {SamplingParams().min_p:g}: off)")
    sampling.add_argument(
        "--seed", type=int, default=UNSET, help=f"{CONTROL['seed'].words} (default {RequestSpec().seed})"
    )
    policy = parser.add_argument_group("draft-length policies and router")
    defaults = PolicyParams()
    policy.add_argument("--k-min", type=int, default=UNSET, help=f"(default {defaults.k_min})")
    policy.add_argument("--k-max", type=int, default=UNSET, help=f"(default {defaults.k_max})")
    policy.add_argument(
        "--low-acceptance",
        type=float,
        default=UNSET,
        help=f"acceptance-rate: k-1 below (default {defaults.low_acceptance:g})",
    )
    policy.add_argument(
        "--high-acceptance",
        type=float,
        default=UNSET,
        help=f"acceptance-rate: k+1 above (default {defaults.high_acceptance:g})",
    )
    policy.add_argument(
        "--ema-alpha",
        type=float,
        default=UNSET,
        help=f"accepted-length: EMA weight (default {defaults.ema_alpha:g})",
    )
    policy.add_argument(
        "--confidence-threshold",
        type=float,
        default=UNSET,
        help="confidence: stop drafting when the estimated chance of a rejection exceeds this "
        f"(default {defaults.confidence_threshold:g})",
    )
    policy.add_argument(
        "--route-map",
        metavar="CLASS=NAME",
        action="append",
        default=UNSET,
        help=f"send a router class (code, prose) to a drafter, or to {NONE_ROUTE} (no speculation for that class)",
    )


def add_router_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--router",
        metavar="FILE",
        default=UNSET,
        help="a learned router (`specplay router train`) for --route auto, instead of the code/prose heuristic",
    )


def add_sessions_dir_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--sessions-dir",
        metavar="DIR",
        default=UNSET,
        help="where sessions live (default: $SPECPLAY_SESSIONS_DIR, else ./sessions)",
    )
