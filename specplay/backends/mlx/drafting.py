"""The MLX drafter interface: one class per drafter form (specplay.drafters), so the generation
never asks which kind of drafter it holds.

A drafter is loaded once per backend (`LoadedDrafter`: weights, a head) and opened once per
generation (`Drafter`: its cache or index over that generation's tokens). Another model and an
early exit draft alike, token by token through a KV cache of their own (`CacheDrafter`); a
proposer (prompt lookup) proposes from the committed tokens alone (`ProposerDrafter`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import trim_prompt_cache

from specplay.backends.mlx.early_exit import EarlyExitModel, LayerSplit, check_layers, head_identity, load_exit_head
from specplay.backends.mlx.kernels import draw_kernel
from specplay.backends.mlx.loading import LoadedModel, folder_identity, load_model, rewindable_cache
from specplay.backends.mlx.trees import NO_TREE_PASS, MlxTree, TreePass, grow_tree, tree_pass
from specplay.drafters import DrafterKind, EarlierOutputs, Form, ModelConfig, Proposers, TreeProposer, kind_of
from specplay.engine.correction_rank import LOGITS, correction_ranks
from specplay.engine.layout import is_chain
from specplay.engine.sampling import one_hot, softmax
from specplay.engine.settings import SamplingParams
from specplay.engine.tree import TreeShape

PREFILL_CHUNK = 512  # tokens per forward when a cache catches up on a long stretch
KeepDrafting = Callable[[Sequence[float]], bool]
"""A policy asked after each drafted token, with the drafter's confidence in each so far."""


def fit_vocab(logits: mx.array, vocab_size: int) -> mx.array:
    """Logits [rows, vocab_size]: rows past the tokenizer (embedding padding) dropped, ids the model
    cannot produce given -inf."""
    width = logits.shape[-1]
    if width > vocab_size:
        return logits[:, :vocab_size]
    if width < vocab_size:
        pad = mx.full((logits.shape[0], vocab_size - width), -mx.inf, dtype=logits.dtype)
        return mx.concatenate([logits, pad], axis=-1)
    return logits


class ModelCache:
    """A model, its KV cache, and how many of the generation's tokens the cache holds."""

    def __init__(self, name: str, model: Any, cache: list[Any], vocab_size: int, tree: TreePass | None = None) -> None:
        self.name, self.model, self.cache, self.vocab_size = name, model, cache, vocab_size
        self.length = 0
        self.tree_pass = tree
        """Its pass over a draft tree (trees.py); None where its family cannot take one."""

    def forward_tree(self, token_ids: mx.array, mask: mx.array, positions: Sequence[int]) -> mx.array:
        """`forward` over rows masked by `mask`, each at its own position (trees.py)."""
        assert self.tree_pass is not None, "only a model with a tree pass is given a tree"
        logits = self.tree_pass(token_ids, self.cache, mask, positions)
        self.length += token_ids.shape[0]
        return fit_vocab(logits, self.vocab_size)

    def forward(self, token_ids: mx.array) -> mx.array:
        """Logits [len(token_ids), vocab] for the positions after each token; caches them."""
        logits = self.model(token_ids[None], cache=self.cache)[0]
        self.length += token_ids.shape[0]
        return fit_vocab(logits, self.vocab_size)

    def trim_to(self, length: int) -> None:
        if length < self.length:
            trim_prompt_cache(self.cache, self.length - length)
            self.length = length

    def offset(self) -> int:
        """What the cache itself says it holds (for checks)."""
        return int(self.cache[0].offset)

    def catch_up(self, tokens: Sequence[int]) -> int:
        """Bring the cache to all of `tokens` but the last, chunk by chunk; how many it took in."""
        before = self.length
        while len(tokens) - 1 - self.length > 0:
            chunk = tokens[self.length : min(self.length + PREFILL_CHUNK, len(tokens) - 1)]
            self.forward(mx.array(chunk))
            mx.eval([c.state for c in self.cache])
        return self.length - before

    def pending(self, tokens: Sequence[int]) -> mx.array:
        """The tokens the cache has yet to see, the last committed one included."""
        if len(tokens) - self.length > PREFILL_CHUNK:
            self.catch_up(tokens)
        return mx.array(tokens[self.length :])


@dataclass
class MlxDraft:
    tokens: mx.array  # [k] int; k may be 0 (a proposer found nothing)
    rows: mx.array | None  # [k, vocab] float32: the drafter's distributions; None where one-hot
    vocab_size: int
    scores: mx.array | None = None
    """[k, vocab]: a greedy model drafter's logits, kept (already computed) to rank corrections in
    (width.py): its softmax would cost an exponential per token of the vocabulary per round."""
    origin: str | None = None
    """The drafter's note on where the draft came from (a proposer's; kind.Proposal)."""

    @property
    def p_draft(self) -> mx.array:
        """Built only where verification reads it: greedy lossless verification needs the tokens alone."""
        return self.rows if self.rows is not None else one_hot(self.tokens, self.vocab_size, mx)

    def ranks(self, corrections: mx.array) -> mx.array | None:
        """Each correction's rank among the drafter's tokens (width.py), from its distributions or
        at temperature 0 its logits; None for a proposer, which has no second choice."""
        if self.rows is not None:
            return correction_ranks(self.rows, corrections, mx)
        return None if self.scores is None else correction_ranks(self.scores, corrections, mx, floor=LOGITS)


def certain_draft(tokens: Sequence[int], vocab_size: int, origin: str | None = None) -> MlxDraft:
    """A proposal with no distributions of its own: one-hot at every temperature."""
    return MlxDraft(mx.array(list(tokens), dtype=mx.int32), None, vocab_size, origin=origin)


def uniforms(values: Sequence[float]) -> mx.array:
    return mx.array(np.asarray(values, dtype=np.float32))


def draw(
    logits: mx.array, sampling: SamplingParams, drawn: mx.array | None, compiled: bool
) -> tuple[mx.array, mx.array | None]:
    """One token per row of logits, and the distribution it was drawn from (None when greedy:
    the argmax needs no distribution nor draw, and its one-hot is built only where needed)."""
    if sampling.greedy:
        return mx.argmax(logits, axis=-1), None
    assert drawn is not None, "a sampled draw needs its uniform"
    return draw_kernel(sampling, compiled)(logits, drawn)


class Drafter(Protocol):
    """One drafter over one generation's tokens. Between rounds it holds a prefix of the
    committed tokens but the last (`length` of them)."""

    name: str
    writer: ModelCache | None
    """The cache a draft-only lane decodes with; None where the drafter cannot write alone."""
    cannot_write: str | None
    """Why it cannot (its kind's words), where it cannot."""
    grows_trees: bool
    """It drafts trees where asked (else its trees are chains: `chains_because` says why)."""
    chains_because: str

    @property
    def length(self) -> int: ...

    def catch_up(self, tokens: Sequence[int]) -> int:
        """Take in all of `tokens` but the last; how many it took in."""

    def proposal(self, tokens: Sequence[int], k: int) -> list[int] | None:
        """What it would draft, at no cost worth timing; None where drafting is the cost (a model)."""

    def draft(
        self,
        tokens: Sequence[int],
        shape: TreeShape,
        *,
        sampling: SamplingParams,
        drawn: Sequence[float],
        keep_drafting: KeepDrafting | None,
        compiled: bool,
    ) -> MlxDraft | MlxTree:
        """A draft within `shape` to follow `tokens` (the committed ones): at width 1 a chain of up
        to `shape.depth` tokens (MlxDraft, verified by the causal pass); wider, a tree
        (engine/tree.py), or its chain where it cannot grow one."""

    def trim_to(self, length: int) -> None:
        """Forget what it holds past `length` tokens."""

    def held(self) -> int:
        """What its cache or index itself says it holds (for checks)."""

    def remember(self, output: Sequence[int]) -> None:
        """A generation ended with `output`, the target's text: a drafter that learns from
        earlier outputs takes it in (suffix decoding); the others keep nothing."""


class CacheDrafter:
    """Forms `model` and `target-layers`: a model with a KV cache of its own, drafting a token per forward."""

    def __init__(self, cache: ModelCache) -> None:
        self.name, self.cache, self.writer = cache.name, cache, cache
        self.cannot_write = None
        self.grows_trees = cache.tree_pass is not None
        self.chains_because = NO_TREE_PASS

    @property
    def length(self) -> int:
        return self.cache.length

    def catch_up(self, tokens: Sequence[int]) -> int:
        return self.cache.catch_up(tokens)

    def proposal(self, tokens: Sequence[int], k: int) -> list[int] | None:
        return None

    def draft(
        self,
        tokens: Sequence[int],
        shape: TreeShape,
        *,
        sampling: SamplingParams,
        drawn: Sequence[float],
        keep_drafting: KeepDrafting | None,
        compiled: bool,
    ) -> MlxDraft | MlxTree:
        if self.grows_trees and shape.width > 1:
            return grow_tree(self.cache, tokens, shape, sampling, drawn)
        return self._chain(
            tokens, shape.depth, sampling=sampling, drawn=drawn, keep_drafting=keep_drafting, compiled=compiled
        )

    def _chain(
        self,
        tokens: Sequence[int],
        k: int,
        *,
        sampling: SamplingParams,
        drawn: Sequence[float],
        keep_drafting: KeepDrafting | None,
        compiled: bool,
    ) -> MlxDraft:
        """A chain of up to k tokens, a token per forward pass."""
        model = self.cache
        u = None if sampling.greedy else uniforms(drawn)  # the argmax needs no draw
        inputs = model.pending(tokens)
        drafted, rows, confidences = [], [], []
        for i in range(k):
            logits = model.forward(inputs)[-1:]
            token, probs = draw(logits, sampling, None if u is None else u[i : i + 1], compiled)
            drafted.append(token)
            # Greedy: the logits, computed anyway, are kept to rank a rejection's correction in.
            rows.append(logits if probs is None else probs)
            if keep_drafting is None:
                mx.async_eval(token)  # overlap this step's compute with building the next
            else:
                # At temperature 0 the drafter's own confidence is its softmax, not the one-hot.
                belief = softmax(logits, mx) if probs is None else probs
                confidences.append(mx.take_along_axis(belief, token[:, None], axis=-1).item())
                if not keep_drafting(confidences):
                    break
            inputs = token
        out = mx.concatenate(drafted)
        # Wait for the draft, so draft and verify times are measured apart. It costs the device the
        # time the host takes to build the verify graph; on CPUs, where MLX dispatch blocks on work
        # in flight, nothing (benchmarks/vs_mlx_lm).
        mx.eval(out)
        stacked = mx.concatenate(rows)  # built lazily: computed only where verification reads it
        if sampling.greedy:
            return MlxDraft(out, None, model.vocab_size, scores=stacked)
        return MlxDraft(out, stacked, model.vocab_size)

    def trim_to(self, length: int) -> None:
        self.cache.trim_to(length)

    def held(self) -> int:
        return self.cache.offset()

    def remember(self, output: Sequence[int]) -> None:
        """A model learns nothing from its outputs."""


class ProposerDrafter:
    """Form `proposer`: proposals from the committed tokens alone, certain (one-hot), so each
    rule applies unchanged (lossless acceptance is p_target(x)); a tree's siblings are judged each
    against what the ones before left (engine/tree.py). It only ever takes in committed tokens, so
    a rejection has nothing to rewind."""

    writer = None
    chains_because = "it proposes one continuation, drafted as a chain"

    def __init__(
        self, name: str, proposers: Proposers, vocab_size: int, cannot_write: str, grows_trees: bool = False
    ) -> None:
        self.name, self.proposers, self.vocab_size = name, proposers, vocab_size
        self.proposer = proposers.open()
        self.cannot_write = cannot_write
        self.grows_trees = grows_trees
        """Its kind grows trees: its proposer drafts within the round's shape (kind.TreeProposer)."""

    @property
    def length(self) -> int:
        return self.proposer.length

    def catch_up(self, tokens: Sequence[int]) -> int:
        before = self.proposer.length
        self.proposer.extend(tokens, len(tokens) - 1)
        return self.proposer.length - before

    def proposal(self, tokens: Sequence[int], k: int) -> list[int] | None:
        return self.proposer.propose(tokens, k)

    def draft(
        self,
        tokens: Sequence[int],
        shape: TreeShape,
        *,
        sampling: SamplingParams,
        drawn: Sequence[float],
        keep_drafting: KeepDrafting | None,
        compiled: bool,
    ) -> MlxDraft | MlxTree:
        """Its proposal, certain (one-hot rows): a chain, or where its kind grows trees and the
        shape is wider than 1, a tree whose distinct siblings are certain each."""
        origin = None
        if self.grows_trees:
            shaped = cast(TreeProposer, self.proposer).draft(tokens, shape)
            if not is_chain(shaped.parents):
                return MlxTree(list(shaped.tokens), list(shaped.parents), None, origin=shaped.origin)
            proposal, origin = list(shaped.tokens), shaped.origin
        else:
            proposal = self.proposer.propose(tokens, shape.depth)
        if keep_drafting is not None:
            # Its confidence in each of its tokens is 1, so a policy that stops early never does
            # here; asked anyway so a policy sees every kind alike.
            for count in range(1, len(proposal) + 1):
                if not keep_drafting([1.0] * count):
                    proposal = proposal[:count]
                    break
        return certain_draft(proposal, self.vocab_size, origin)

    def trim_to(self, length: int) -> None:
        """A proposal is never taken in, so a round has nothing to rewind; a conversation's next
        turn that shares fewer tokens than were indexed is indexed again."""
        if length < self.proposer.length:
            self.proposer.extend((), 0)

    def held(self) -> int:
        return self.proposer.length

    def remember(self, output: Sequence[int]) -> None:
        self.proposers.remember(output)


class LoadedDrafter(Protocol):
    """A drafter as the backend holds it between generations."""

    name: str
    kind: DrafterKind
    model_config: ModelConfig

    def open(self, vocab_size: int) -> Drafter:
        """A fresh drafter for one generation."""

    def record(self) -> dict[str, Any]:
        """What a session records of it: its kind and parameters (a replay reads them back) and
        what identifies its weights."""


@dataclass(frozen=True)
class LoadedProposer:
    """Form `proposer`: no weights; what its kind keeps while loaded (`proposers`: a memory of
    earlier outputs, or nothing) opens each generation's proposer."""

    name: str
    kind: DrafterKind
    model_config: ModelConfig
    proposers: Proposers

    def open(self, vocab_size: int) -> Drafter:
        why = self.kind.cannot_write or "it proposes only from what the text repeats"
        return ProposerDrafter(self.name, self.proposers, vocab_size, why, self.kind.grows_trees)

    def record(self) -> dict[str, Any]:
        note = self.proposers.note  # what it read as it loaded, for sessions and the status line
        loaded = {"loaded": note} if note else {}
        return self.kind.record(self.model_config) | {"source": self.kind.describe(self.model_config)} | loaded


@dataclass(frozen=True)
class LoadedModelDrafter:
    """Form `model`: another model, loaded once; each generation gets a fresh KV cache."""

    name: str
    kind: DrafterKind
    model_config: ModelConfig
    loaded: LoadedModel

    def open(self, vocab_size: int) -> Drafter:
        tree = tree_pass(self.loaded.model, f"drafter {self.name!r}")
        return CacheDrafter(ModelCache(self.name, self.loaded.model, rewindable_cache(self.loaded), vocab_size, tree))

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind.name, **folder_identity(self.loaded)}


@dataclass(frozen=True)
class LoadedEarlyExit:
    """Form `target-layers`: the target's own first layers (no weight copied) and a head if trained;
    each generation gets a cache of its own, the target's kind of cache cut to those layers."""

    name: str
    kind: DrafterKind
    model_config: ModelConfig
    model: EarlyExitModel
    target: LoadedModel
    head: dict[str, Any] | None = None
    """The head's identity (path, sha256), for sessions."""

    @property
    def layers(self) -> int:
        return int(self.model_config.params["layers"])

    def open(self, vocab_size: int) -> Drafter:
        cache = rewindable_cache(self.target)[: self.layers]
        tree = tree_pass(self.model.split, f"drafter {self.name!r}", self.model.head, self.layers)
        return CacheDrafter(ModelCache(self.name, self.model, cache, vocab_size, tree))

    def record(self) -> dict[str, Any]:
        return self.kind.record(self.model_config) | {
            "head": self.head,
            "own_parameters": self.model.own_parameters(),
            "target_layers": len(self.model.split.layers),
            "source": self.kind.describe(self.model_config),
        }


def _load_model(
    name: str, kind: DrafterKind, model_config: ModelConfig, target: LoadedModel, earlier: EarlierOutputs | None
) -> LoadedDrafter:
    return LoadedModelDrafter(name, kind, model_config, load_model(name, model_config.location))


def _load_early_exit(
    name: str, kind: DrafterKind, model_config: ModelConfig, target: LoadedModel, earlier: EarlierOutputs | None
) -> LoadedDrafter:
    """Built over `target`'s own modules: its layer count checked, a head loaded and checked."""
    layers = int(model_config.params["layers"])
    split = LayerSplit(target.model, f"early-exit drafter {name!r}: the target ({target.location})")
    check_layers(layers, split, f"early-exit drafter {name!r}")
    head, identity = None, None
    if model_config.params.get("head"):
        folder = Path(model_config.params["head"])
        head = load_exit_head(folder, layers, split, folder_identity(target))
        identity = head_identity(folder)
    model = EarlyExitModel(split, layers, head)
    return LoadedEarlyExit(name=name, kind=kind, model_config=model_config, model=model, target=target, head=identity)


def _load_proposer(
    name: str, kind: DrafterKind, model_config: ModelConfig, target: LoadedModel, earlier: EarlierOutputs | None
) -> LoadedDrafter:
    return LoadedProposer(name, kind, model_config, kind.proposers(model_config, earlier))


Loader = Callable[[str, DrafterKind, ModelConfig, LoadedModel, EarlierOutputs | None], LoadedDrafter]
"""(name, kind, model_config, the loaded target, the earlier outputs read for the drafters that remember)."""
LOADERS: dict[Form, Loader] = {
    "model": _load_model,
    "target-layers": _load_early_exit,
    "proposer": _load_proposer,
}
"""How MLX loads each drafter form (a kind of form `none` is never loaded: it drafts nothing)."""


def load_drafter(
    name: str, model_config: ModelConfig, *, target: LoadedModel, earlier: EarlierOutputs | None = None
) -> LoadedDrafter:
    """What one drafter needs at run time, by its kind's form; call on the MLX thread. `earlier`:
    the outputs the command read for the drafters that remember (drafters/memory.py)."""
    kind = kind_of(model_config)
    return LOADERS[kind.form](name, kind, model_config, target, earlier)
