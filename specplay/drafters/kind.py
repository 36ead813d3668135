"""What every drafter kind is: the object the registry holds for each (specplay.drafters).

A kind knows how a user writes it (`--draft [NAME=]SOURCE`), how it is described, where it runs,
whether it can write a text alone, what a session records of it and how that record is read
back. How a backend runs it is its `form`: the MLX backend has one drafter class per form, so
its generation code never asks which kind it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from specplay.drafters.memory import EarlierOutputs
from specplay.drafters.model_config import ModelConfig, Role
from specplay.engine.tree import TreeShape
from specplay.errors import ConfigError

Form = Literal["model", "target-layers", "proposer", "none"]
"""How a backend runs a kind: another model with its own weights and cache; the target's own
first layers with a cache of their own; a proposer over the committed tokens (no weights, no
cache to rewind); or no drafting at all."""


class Proposer(Protocol):
    """A drafter of form `proposer`, for one generation: pure Python over the committed tokens.
    Its proposals are certain (one-hot), so every acceptance rule applies unchanged."""

    length: int
    """Committed tokens it has taken in."""

    def extend(self, tokens: Sequence[int], length: int) -> None:
        """Take in tokens[self.length:length] (a shorter `length` than taken in starts over)."""

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k tokens to follow `tokens`; [] where it has nothing to propose."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposer's draft: its tokens laid out as a tree (engine/layout.py; a chain's parents are
    -1, 0, 1, ...), every node certain, and where it came from."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    origin: str | None = None
    """The drafter's note on where the draft came from, for the drill-down and sessions (suffix
    decoding: which earlier output, matched on how many tokens); None where it says nothing."""


class TreeProposer(Proposer, Protocol):
    """The proposer of a kind that `grows_trees`: it drafts within a round's shape, and says where
    its draft came from."""

    def draft(self, tokens: Sequence[int], shape: TreeShape) -> Proposal:
        """A draft within `shape` to follow `tokens`: at width 1 a chain of up to `shape.depth`
        tokens, wider a tree of distinct siblings (none where it has nothing to propose)."""


class Proposers(Protocol):
    """What a kind of form `proposer` keeps while its backend is loaded: it opens each
    generation's proposer, and may learn from the outputs of the generations that end."""

    note: str | None
    """What it says once, at load (what it read); None where it has nothing to say."""

    def open(self) -> Proposer:
        """A fresh proposer for one generation."""

    def remember(self, output: Sequence[int]) -> None:
        """A generation ended with `output`, text the target wrote (its committed tokens)."""


@dataclass(frozen=True)
class FreshProposers:
    """A kind that keeps nothing between generations: each gets a new proposer."""

    make: Callable[[], Proposer]
    note: str | None = None

    def open(self) -> Proposer:
        return self.make()

    def remember(self, output: Sequence[int]) -> None:
        """Nothing is kept."""


class DrafterKind:
    """One kind of drafter. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    """The word a `--draft` value starts with (`prompt-lookup:n=2-4`) and a session's record names."""
    syntax: ClassVar[str]
    """How a user writes it, for help texts."""
    summary: ClassVar[str]
    form: ClassVar[Form]
    backends: ClassVar[tuple[str, ...]] = ("mlx",)
    """The backends that run it."""
    cannot_write: ClassVar[str | None] = None
    """Why a draft-only lane cannot run on it (None: it writes alone, as a small model does)."""
    grows_trees: ClassVar[bool] = False
    """It can draft a tree (engine/tree.py) where a backend verifies one; else its rounds draft chains."""
    record_kinds: ClassVar[tuple[str, ...]] = ()
    """The `kind` values of session records this kind reads back (its name besides)."""

    def parse(self, name: str, role: Role, options: str | None, field: str) -> ModelConfig:
        """The model of a `--draft` value written `name[:options]`; a ConfigError names `field`."""
        raise NotImplementedError

    def describe(self, model: ModelConfig) -> str:
        """One line for views, help and exports."""
        raise NotImplementedError

    def record(self, model: ModelConfig) -> dict[str, Any]:
        """What a session records of a drafter of this kind (JSON values; `kind` first)."""
        return {"kind": self.name, **model.params}

    def replay(self, name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
        """The model a session's record describes (KeyError, TypeError, ValueError when damaged)."""
        raise NotImplementedError

    def matches(self, model: ModelConfig, record: Mapping[str, Any]) -> bool:
        """A session's model record is this drafter: the same kind and settings."""
        same = record.get("kind") == self.name
        return same and all(record.get(key) == value for key, value in model.params.items() if key in record)

    def proposer(self, model: ModelConfig) -> Proposer:
        """A fresh proposer for one generation (form `proposer` only)."""
        raise NotImplementedError(f"{self.name} is not a proposer")

    def proposers(self, model: ModelConfig, earlier: EarlierOutputs | None) -> Proposers:
        """What the backend holds of a proposer while loaded (form `proposer` only): by default a
        fresh `proposer` per generation; `earlier`, the outputs read for it at the command's edge
        (where `recalls` asked for some)."""
        return FreshProposers(lambda: self.proposer(model))

    def recalls(self, model: ModelConfig) -> int:
        """Tokens of earlier outputs the command reads for it from the sessions folder as it
        starts (drafters/memory.py); 0: it reads none."""
        return 0

    def check_backend(self, model: ModelConfig, backend: str) -> None:
        """Refuse, in one line, a backend that cannot run it."""
        if backend not in self.backends:
            backends = " or ".join(self.backends)
            raise ConfigError("draft", f"{model.name!r} ({self.describe(model)}) runs with --backend {backends} only")


def options(text: str, field: str, kind: str) -> dict[str, str]:
    """KEY=VALUE options separated by commas (`layers=8,head=DIR`)."""
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(field, f"{kind} takes KEY=VALUE options separated by commas (got {text!r})")
        out[key.strip()] = value.strip()
    return out


def absolute(path: str) -> str:
    """Sessions record paths absolute, so a replay from another folder finds them."""
    return str(Path(path).expanduser().absolute())
