"""The drafter kinds: one object each, and the registry every layer reads them from.

A drafter is written `--draft [NAME=]SOURCE`. A SOURCE that starts with a kind's name is that
kind, with its options after a colon; anything else is another model:

    FOLDER | HF_ID | FILE.gguf | NAME      another model (a folder, a cached Hugging Face id, a
                                          GGUF file, a model `specplay fetch` downloaded)
    prompt-lookup[:n=MIN-MAX]             proposes what followed the last match of the last n tokens
    early-exit:layers=L[,head=DIR]        the target's first L layers, optionally with a trained head
    suffix[:depth=D,min_prob=P,memory=N]  proposes what most often followed the longest match in this
                                          request and in earlier outputs (suffix decoding)

and `none` is the route of no drafter. A folder named like a kind is written with a path:
./prompt-lookup.

Adding a kind touches its own module and its entry in KINDS: parsing, help, the configuration's
checks, the playground, sessions and their replay, the router's evidence and the MLX backend (by
the kind's form) read it from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specplay.drafters.early_exit import EARLY_EXIT
from specplay.drafters.kind import DrafterKind, Form, Proposal, Proposer, Proposers, TreeProposer
from specplay.drafters.memory import EarlierOutput, EarlierOutputs
from specplay.drafters.model import MODEL
from specplay.drafters.model_config import ModelConfig, Role
from specplay.drafters.none import NONE
from specplay.drafters.prompt_lookup import PROMPT_LOOKUP
from specplay.drafters.suffix import SUFFIX
from specplay.errors import ConfigError

__all__ = [
    "EARLY_EXIT",
    "KINDS",
    "MODEL",
    "NONE",
    "PROMPT_LOOKUP",
    "SUFFIX",
    "DrafterKind",
    "EarlierOutput",
    "EarlierOutputs",
    "Form",
    "ModelConfig",
    "Proposal",
    "Proposer",
    "Proposers",
    "Role",
    "TreeProposer",
    "cannot_write",
    "drafter_syntax",
    "kind_named",
    "kind_of",
    "parse_model",
    "replay_model",
]

KINDS: dict[str, DrafterKind] = {kind.name: kind for kind in (MODEL, PROMPT_LOOKUP, SUFFIX, EARLY_EXIT, NONE)}
"""Every kind by its name; MODEL is the kind of any --target or --draft value no other kind's name starts."""


def drafter_syntax() -> str:
    """How each kind made from no model or from the target is written, for help texts."""
    written = [kind.syntax for kind in KINDS.values() if kind.form not in ("model", "none")]
    return ", ".join(written[:-1]) + (" or " if len(written) > 1 else "") + written[-1]


def kind_of(model: ModelConfig) -> DrafterKind:
    """The kind of a configured model (a target is a model)."""
    if model.local or model.on_server:  # a model, wherever its weights are
        return MODEL
    return KINDS[model.kind]


def kind_named(name: str, drafters: Iterable[ModelConfig]) -> DrafterKind | None:
    """The kind of the drafter a route names (`none` included); None for a route setting (auto,
    adaptive) or an unknown name."""
    if name == NONE.name:
        return NONE
    return next((kind_of(d) for d in drafters if d.name == name), None)


def cannot_write(route: str, drafters: Iterable[ModelConfig]) -> str | None:
    """Why a draft-only lane cannot run on the drafter a route names, in its kind's words (None:
    it can, or the route is a setting such as auto)."""
    kind = kind_named(route, drafters)
    return kind.cannot_write if kind is not None else None


def parse_model(name: str, role: Role, written: str, field: str) -> ModelConfig:
    """The model of one `--target` / `--draft` value; `field` names the flag for errors."""
    word, sep, given = written.partition(":")
    kind = KINDS.get(word)
    if kind is None or kind is MODEL:
        return MODEL.parse(name, role, written, field)
    if role == "target":
        raise ConfigError(field, f"{word} is a drafter, not a target; give the target as a folder or file")
    return kind.parse(name, role, given if sep else None, field)


def replay_model(name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
    """A model this machine ran, from what its session recorded; records from before drafter kinds
    existed are models, named by their folder. A kind this specplay does not know is a ConfigError."""
    name_of_kind = record.get("kind", MODEL.name)
    for kind in KINDS.values():
        if kind.form != "none" and (name_of_kind == kind.name or name_of_kind in kind.record_kinds):
            return kind.replay(name, role, record)
    known = [k for kind in KINDS.values() if kind.form != "none" for k in (kind.name, *kind.record_kinds)]
    raise ConfigError(
        role,
        f"a session names a {role} of kind {name_of_kind!r}, which this specplay does not know (known: "
        f"{', '.join(known)}); a newer specplay wrote it, or give the models with --target and --draft",
    )
