"""The flags shared by the commands that run models. Parsing only: `configure.py` turns them into
a RunConfig. These flags have no argparse default, so a command knows which ones the user gave
(a session's settings apply where the user gave none); the defaults live in the configuration."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, NoReturn

from specplay.config.controls import CONTROLS, Flag, FlagGroup
from specplay.config.model_sets import default_models
from specplay.config.numbers import count_number, seed_number
from specplay.config.run_config import BACKENDS, STRATEGIES, RequestConfig, VllmOptions
from specplay.drafters import drafter_syntax
from specplay.engine.rules import RULES, RuleParams, all_settings
from specplay.engine.settings import MODES, NONE_ROUTE, SpecSettings, flattened

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

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        # argparse swallows every OSError here, so `--help | head` would exit 0 where any other
        # output exits PIPE_CLOSED: a closed pipe goes on to the command line's edge.
        out = file or sys.stderr
        if not message or out is None:
            return
        try:
            out.write(message)
            out.flush()
        except BrokenPipeError:
            raise
        except OSError:
            pass

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        if action.type is not int:
            return super()._get_value(action, arg_string)
        try:
            return seed_number(arg_string) if action.dest == "seed" else count_number(arg_string)
        except ValueError as error:
            raise argparse.ArgumentError(action, str(error)) from None


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(f"models (default: {default_models()})")
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


def add_prompt_flags(parser: argparse.ArgumentParser, turns: bool = False) -> None:
    """--prompt or --prompt-file, and --raw; with `turns`, --prompt given again is a conversation's
    next user turn."""
    group = parser.add_argument_group("prompt")
    prompt_from = group.add_mutually_exclusive_group()
    if turns:
        prompt_from.add_argument(
            "--prompt",
            metavar="TEXT",
            action="append",
            default=UNSET,
            help="a user turn; give it again for each later turn of a conversation, in order",
        )
    else:
        prompt_from.add_argument("--prompt", metavar="TEXT", default=UNSET)
    prompt_from.add_argument("--prompt-file", metavar="F", type=Path, default=UNSET)
    add_raw_flag(group)


def add_raw_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--raw",
        action="store_true",
        default=UNSET,
        help="encode the prompt as written, without the chat template",
    )


def add_output_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    request = RequestConfig()
    parser.add_argument(
        "--max-tokens", type=int, default=UNSET, help=f"tokens to generate at most (default {request.max_tokens})"
    )
    parser.add_argument(
        "--ignore-eos", action="store_true", default=UNSET, help="generate --max-tokens tokens whatever comes"
    )


SETTING_FLAGS = (
    Flag(
        name="--tree",
        setting="tree_nodes",
        group="decoding",
        type=int,
        metavar="N",
        help="draft a tree of N nodes at most, the verify pass's rows but one (default: width x k)",
    ),
    Flag(name="--top-p", setting="top_p", group="sampling", type=float, help="(default {default:g}: off)"),
    Flag(name="--top-k", setting="top_k", group="sampling", type=int, help="(default {default}: off)"),
    Flag(name="--min-p", setting="min_p", group="sampling", type=float, help="(default {default:g}: off)"),
    Flag(name="--k-min", setting="k_min", group="policy", type=int, help="(default {default})"),
    Flag(name="--k-max", setting="k_max", group="policy", type=int, help="(default {default})"),
    Flag(
        name="--low-acceptance",
        setting="low_acceptance",
        group="policy",
        type=float,
        help="acceptance-rate: k-1 below (default {default:g})",
    ),
    Flag(
        name="--high-acceptance",
        setting="high_acceptance",
        group="policy",
        type=float,
        help="acceptance-rate: k+1 above (default {default:g})",
    ),
    Flag(
        name="--ema-alpha",
        setting="ema_alpha",
        group="policy",
        type=float,
        help="accepted-length: EMA weight (default {default:g})",
    ),
    Flag(
        name="--confidence-threshold",
        setting="confidence_threshold",
        group="policy",
        type=float,
        help="confidence: stop drafting when the estimated chance of a rejection exceeds this (default {default:g})",
    ),
)
"""The flags of settings that no control sets; a control's own flag (config/controls.py) takes the
place of its setting's here, so a control added for one of these settings keeps its flag."""

_GROUP_TITLES: dict[FlagGroup, str] = {
    "decoding": "speculative decoding (live in the playground)",
    "sampling": "sampling",
    "policy": "draft-length policies and router",
}


def rule_flags() -> list[Flag]:
    """Each acceptance rule's settings (the knob control's), from the rules' registry."""
    defaults = RuleParams()
    flags = []
    for setting in all_settings():
        text = setting.help.replace("{", "{{").replace("}", "}}")  # a literal, in a format string
        if getattr(defaults, setting.field) is not None:
            text += " (default {default:g})"
        flags.append(
            Flag(
                name=setting.flag,
                setting=setting.field,
                group="decoding",
                type=float,
                metavar=setting.metavar,
                help=text,
            )
        )
    return flags


def setting_flags() -> list[tuple[Flag, str]]:
    """Every setting's flag with its control's words ("" for a plain flag), section by section
    and within one in the order of the settings (engine/settings.flattened), the playground's
    own (seed) after them: the order --help lists them in."""
    controlled = [
        (control.flag if control.flag.setting else replace(control.flag, setting=control.setting), control.words)
        for control in CONTROLS.values()
        if control.flag is not None
    ]
    claimed = {flag.setting for flag, _ in controlled}
    plain = [(flag, "") for flag in (*SETTING_FLAGS, *rule_flags()) if flag.setting not in claimed]
    sections = list(_GROUP_TITLES)
    order = {name: i for i, name in enumerate(flattened(SpecSettings()))}
    return sorted(
        [*controlled, *plain],
        key=lambda pair: (sections.index(pair[0].group), order.get(pair[0].setting or "", len(order))),
    )


def add_decoding_flags(parser: argparse.ArgumentParser, rule_list: bool = False) -> None:
    """`rule_list`: --rule takes several rules, comma-separated (a sweep runs each)."""
    groups = {key: parser.add_argument_group(title) for key, title in _GROUP_TITLES.items()}
    groups["decoding"].add_argument(
        "--mode", choices=MODES, default=UNSET, help="speculative (the default), target or draft"
    )
    defaults = flattened(SpecSettings())
    rules = ", ".join(f"{name} ({rule.description})" for name, rule in RULES.items())
    for flag, words in setting_flags():
        assert flag.setting is not None
        if rule_list and flag.setting == "rule":
            flag = replace(flag, choices=None, metavar="RULE[,RULE...]", help=flag.help + "; or all")
        default = flag.default() if flag.default is not None else defaults[flag.setting]
        text = flag.help.format(words=words, default=default, rules=rules)
        group = groups[flag.group]
        if flag.switch:
            group.add_argument(flag.name, dest=flag.setting, action="store_true", default=UNSET, help=text)
        else:
            group.add_argument(
                flag.name,
                dest=flag.setting,
                type=flag.type,
                choices=flag.choices,
                metavar=flag.metavar,
                default=UNSET,
                help=text,
            )
    policy = groups["policy"]
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
