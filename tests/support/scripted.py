"""A scripted backend: the real backend protocol without a model library.

Tokens are bytes (256 ids, plus EOS). A model's next-token logits are a seeded function of the
last few tokens of its context, so the same context always gets the same distribution and runs
are repeatable; a drafter is the target's function plus seeded noise (often accepted), or one of
its own (rarely), or a table of fixed distributions where a test wants exact numbers. Caches are
bookkeeping of what a real one would hold, rewound as the real ones are; time is a simulated
clock that moves only when a model computes (a forward of n rows costs a fixed step plus n times
a per-row cost), so every time a run reports follows from its work alone, however often it is
read. The sampling and verification math is the engine's own (sampling.py, verify_rows.py) in
numpy: what the MLX backend runs on the device.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specplay.drafters.prompt_lookup import NgramIndex
from specplay.engine.accept import inverse_cdf_sample
from specplay.engine.backend_protocol import Generation
from specplay.engine.capabilities import Capabilities
from specplay.engine.conversation import Exchange, raw_text, shared_prefix
from specplay.engine.draws import RoundDraws
from specplay.engine.layout import ROOT, depths
from specplay.engine.loop import SpecEngine
from specplay.engine.reference_round import reference_grown_tree
from specplay.engine.routers.routing import routing_for
from specplay.engine.rules import AcceptanceRule
from specplay.engine.sampling import sampling_probs, softmax
from specplay.engine.settings import SamplingParams
from specplay.engine.tree import (
    TreeShape,
    VerifiedDraft,
    chain_verified,
    greedy_numbers,
    row_uniforms,
    sampled_numbers,
    sampled_tree,
)
from specplay.engine.verify_rows import verify_rows
from specplay.errors import ConfigError

EOS = 256
VOCAB = 257
TEXT_BYTES = tuple(b" etaoinshrdlucmfwypvbgk.,\n")
"""The bytes a scripted model writes (others get no mass): output reads as letters and spaces."""
SCRIPTED = Capabilities(top_n=True, scoring=True, counterfactual=True, trees=True)
"""What the MLX backend can do, which this one does too."""

Logits = Callable[[Sequence[int]], np.ndarray]
"""A model: next-token logits [VOCAB] after a whole token sequence."""


def seeded(seed: int, *, order: int = 2, scale: float = 3.0, eos_logit: float = -np.inf) -> Logits:
    """Logits drawn from a generator seeded by (seed, the last `order` tokens); only TEXT_BYTES
    and EOS (at `eos_logit`, never by default) can follow."""
    allowed = np.full(VOCAB, -np.inf)
    allowed[list(TEXT_BYTES)] = 0.0
    allowed[EOS] = eos_logit

    def logits(context: Sequence[int]) -> np.ndarray:
        rng = np.random.default_rng([seed, *context[-order:]])
        return rng.normal(scale=scale, size=VOCAB) + allowed

    return logits


def noisy(base: Logits, seed: int, noise: float, order: int = 2) -> Logits:
    """`base` with seeded Gaussian noise on every logit: a drafter close to the target."""

    def logits(context: Sequence[int]) -> np.ndarray:
        rng = np.random.default_rng([seed, *context[-order:]])
        return base(context) + rng.normal(scale=noise, size=VOCAB)

    return logits


def table(rows: Mapping[int, Sequence[float]], default: Sequence[float]) -> Logits:
    """Fixed distributions by the last token (`default` elsewhere): probabilities over the first
    len(row) ids, as log-probabilities."""

    def logits(context: Sequence[int]) -> np.ndarray:
        row = np.asarray(rows.get(context[-1] if context else -1, default), dtype=np.float64)
        out = np.full(VOCAB, -np.inf)
        with np.errstate(divide="ignore"):
            out[: len(row)] = np.log(row)
        return out

    return logits


def encode_bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class SimulatedClock:
    """Seconds that pass only as models compute; thread-safe."""

    def __init__(self) -> None:
        self._s = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._s += seconds


@dataclass(frozen=True)
class Cost:
    """A model's simulated time: a forward pass costs `step_ms` plus `row_ms` per row it scores;
    `wall_ms` is really slept per forward, for tests that change controls while a run goes."""

    step_ms: float = 10.0
    row_ms: float = 1.0
    wall_ms: float = 0.0


@dataclass
class ScriptedModel:
    name: str
    logits: Logits
    cost: Cost = field(default_factory=Cost)


class ByteDetokenizer:
    """Streaming UTF-8: a character's text arrives with its last byte."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.last_segment = ""

    def add_token(self, token: int) -> None:
        self.last_segment = self._decoder.decode(bytes([token])) if token < 256 else ""

    def finalize(self) -> None:
        self.last_segment = self._decoder.decode(b"", final=True)


@dataclass
class ScriptedDraft:
    tokens: list[int]
    rows: np.ndarray  # [k, VOCAB]: the drafter's distributions (one-hot for prompt lookup)
    logits: np.ndarray | None = None
    """[k, VOCAB]: a greedy drafter's logits, which corrections are ranked in (its rows are one-hot)."""
    ranked: bool = False
    """Whether corrections have a rank: not for prompt lookup, which has no second choice."""


@dataclass
class ScriptedTree:
    parents: list[int]
    tokens: list[int]
    rows: np.ndarray
    """[nodes + 1, VOCAB]: the drafter's distribution at each row (zero where never expanded)."""

    def path(self, row: int) -> list[int]:
        """The tokens from the root to row `row` (0: the root's, none)."""
        out, node = [], row - 1
        while node != ROOT:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]


class ScriptedGeneration:
    """One sequence: committed tokens, and how many of them each model's cache holds (as the MLX
    backend's caches: between rounds a prefix of tokens[:-1])."""

    def __init__(self, backend: ScriptedBackend, prompt_token_ids: Sequence[int]) -> None:
        self.backend = backend
        self.tokens = list(prompt_token_ids)
        self.lengths = {"target": 0} | {name: 0 for name in backend.models if name != "target"}
        self.lookups = {name: NgramIndex(n_min, n_max) for name, (n_min, n_max) in backend.lookups.items()}

    def go_on_with(self, prompt_token_ids: Sequence[int]) -> None:
        """A conversation's next turn, as the MLX backend's: each cache keeps the shared tokens."""
        keep = min(shared_prefix(self.tokens, prompt_token_ids), len(prompt_token_ids) - 1)
        self.lengths = {name: min(length, keep) for name, length in self.lengths.items()}
        for index in self.lookups.values():
            if keep < index.length:
                index.extend((), 0)
        self.tokens = list(prompt_token_ids)

    def _forward(self, name: str, rows: int) -> None:
        """Bookkeeping of one forward pass over the pending tokens and `rows` more."""
        model = self.backend.models[name]
        self.backend.clock.advance((model.cost.step_ms + model.cost.row_ms * rows) / 1000)
        if model.cost.wall_ms:
            time.sleep(model.cost.wall_ms / 1000)
        self.backend.forwards.append((name, rows))
        self.lengths[name] += rows

    def prefill(self, name: str) -> int:
        if name in self.lookups:
            before = self.lookups[name].length
            self.lookups[name].extend(self.tokens, len(self.tokens) - 1)
            return self.lookups[name].length - before
        rows = len(self.tokens) - 1 - self.lengths[name]
        if rows > 0:
            self._forward(name, rows)
        return max(rows, 0)

    def proposal(self, drafter: str, k: int) -> list[int] | None:
        return self.lookups[drafter].propose(self.tokens, k) if drafter in self.lookups else None

    def catch_up(self, drafter: str) -> int:
        return self.prefill(drafter)

    def _probs(self, name: str, context: Sequence[int], sampling: SamplingParams) -> np.ndarray:
        return sampling_probs(self.backend.models[name].logits(context)[None], sampling, np)[0].astype(np.float64)

    def given_draft(self, tokens: Sequence[int]) -> ScriptedDraft:
        tokens = list(tokens)
        return ScriptedDraft(tokens, np.eye(VOCAB)[tokens].reshape(len(tokens), VOCAB))

    def draft(
        self,
        drafter: str,
        shape: TreeShape,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> ScriptedDraft | ScriptedTree:
        """As the MLX backend: a model drafter grows a tree where the width asks for one, else drafts
        a chain (verified by the causal pass, with every rule's numbers); prompt lookup, a chain."""
        if shape.width > 1 and drafter not in self.lookups:
            return self._grow_tree(drafter, shape, sampling, uniforms)
        k = shape.depth
        if drafter in self.lookups:
            proposal = self.lookups[drafter].propose(self.tokens, k)
            if keep_drafting is not None:
                for count in range(1, len(proposal) + 1):
                    if not keep_drafting([1.0] * count):
                        proposal = proposal[:count]
                        break
            return self.given_draft(proposal)
        drafted: list[int] = []
        rows: list[np.ndarray] = []
        own: list[np.ndarray] = []
        confidences: list[float] = []
        for i in range(k):
            self._forward(drafter, len(self.tokens) - self.lengths[drafter] if i == 0 else 1)
            context = [*self.tokens, *drafted]
            probs = self._probs(drafter, context, sampling)
            token = int(inverse_cdf_sample(probs[None], np.array([uniforms[i]]), np)[0])
            drafted.append(token)
            rows.append(probs)
            if sampling.greedy:  # its one-hot ranks nothing: corrections are ranked in its logits
                own.append(self.backend.models[drafter].logits(context))
            if keep_drafting is not None:
                # At temperature 0 the drafter's own confidence is its softmax, not the one-hot.
                belief = softmax(own[-1], np) if sampling.greedy else probs
                confidences.append(float(belief[token]))
                if not keep_drafting(confidences):
                    break
        shape = (len(drafted), VOCAB)
        logits = np.array(own).reshape(shape) if own else None
        return ScriptedDraft(drafted, np.array(rows).reshape(shape), logits, ranked=True)

    def verify(
        self,
        draft: ScriptedDraft | ScriptedTree,
        sampling: SamplingParams,
        rule: AcceptanceRule,
        draws: RoundDraws,
        top_n: int = 0,
    ) -> VerifiedDraft:
        if isinstance(draft, ScriptedTree):
            return self._verify_tree(draft, sampling, draws)
        k = len(draft.tokens)
        self._forward("target", len(self.tokens) - self.lengths["target"] + k)
        p_target = np.array([self._probs("target", [*self.tokens, *draft.tokens[:i]], sampling) for i in range(k + 1)])
        uniforms = np.array([*draws.residual[:k], draws.bonus])
        if k == 0:  # the round is one target step
            bonus = int(inverse_cdf_sample(p_target, uniforms, np)[0])
            tops = _ranked(p_target, top_n) if top_n else None
            return chain_verified(
                drafted=[],
                p_target=[],
                p_draft=[],
                tv_distance=[],
                target_argmax=[],
                corrections=[],
                bonus=bonus,
                top_target=tops,
                top_draft=[] if top_n else None,
            )
        tokens = np.array(draft.tokens)
        out = verify_rows(p_target, tokens, draft.rows, uniforms, rule=rule, n=0, xp=np, logits=draft.logits)
        return chain_verified(
            drafted=list(draft.tokens),
            p_target=out["p_target_x"].tolist(),
            p_draft=out["p_draft_x"].tolist(),
            tv_distance=out["tv"].tolist(),
            target_argmax=out["argmax"].tolist(),
            corrections=out["corrections"].tolist(),
            correction_rank=out["correction_rank"].tolist() if draft.ranked else None,
            bonus=int(out["bonus"][0]),
            rule_stats={name: value.tolist() for name, value in out.get("rule_stats", {}).items()},
            tv_spent=out["tv_spent"].tolist() if "tv_spent" in out else None,
            top_target=_ranked(p_target, top_n) if top_n else None,
            top_draft=_ranked(draft.rows, top_n) if top_n else None,
        )

    def _grow_tree(
        self, drafter: str, shape: TreeShape, sampling: SamplingParams, uniforms: Sequence[float]
    ) -> ScriptedTree:
        """The reference's tree (engine/reference_round.py), a drafter forward per level."""
        committed = len(self.tokens)
        self._forward(drafter, committed - self.lengths[drafter])
        model = self.backend.models[drafter]

        def belief(context: Sequence[int]) -> np.ndarray:
            if sampling.greedy:  # children in its logits' order, weighed by its softmax
                return softmax(model.logits(context).astype(np.float64), np)
            return self._probs(drafter, context, sampling)

        parents, drafted, rows = reference_grown_tree(belief, self.tokens, shape, uniforms, sampling.greedy)
        fed = depths(parents)[: len(rows) - 1]  # the nodes it expanded: every level's but the last
        for level in sorted(set(fed)):
            self._forward(drafter, fed.count(level))
        self._trim(committed, (drafter,))
        table = np.zeros((len(drafted) + 1, VOCAB))
        table[: len(rows)] = rows
        return ScriptedTree(parents, drafted, table)

    def _verify_tree(self, draft: ScriptedTree, sampling: SamplingParams, draws: RoundDraws) -> VerifiedDraft:
        n = len(draft.tokens)
        self._forward("target", len(self.tokens) - self.lengths["target"] + n)
        rows = np.array([self._probs("target", [*self.tokens, *draft.path(row)], sampling) for row in range(n + 1)])
        if sampling.greedy:
            return greedy_numbers(draft.parents, draft.tokens, rows.argmax(axis=-1).tolist())
        uniforms = np.array(row_uniforms(draws.residual, draws.bonus, n))
        out = sampled_numbers(rows, draft.rows, parents=draft.parents, drafted=draft.tokens, uniforms=uniforms, xp=np)
        return sampled_tree(draft.parents, draft.tokens, {name: value.tolist() for name, value in out.items()})

    def counterfactual(
        self,
        drafter: str,
        *,
        shape: TreeShape,
        sampling: SamplingParams,
        rule: AcceptanceRule,
        draws: RoundDraws,
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> VerifiedDraft:
        committed = len(self.tokens) - 1
        verified = self.verify(self.draft(drafter, shape, sampling, draws.draft, keep_drafting), sampling, rule, draws)
        self._trim(committed, ("target", drafter))
        return verified

    def _trim(self, length: int, names: Sequence[str] | None = None) -> None:
        for name in names or list(self.lengths):
            if name in self.lengths:
                self.lengths[name] = min(self.lengths[name], length)

    def commit(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        self._trim(len(self.tokens) - 1)

    def generate(
        self, model: str | None, sampling: SamplingParams, draw: Callable[[], float], pipeline: bool = True
    ) -> Iterator[int]:
        if model in self.lookups:
            raise ConfigError("mode", f"draft cannot run on {model!r}, a prompt-lookup drafter")
        name = model or "target"
        while True:
            self._forward(name, len(self.tokens) - self.lengths[name])
            probs = self._probs(name, self.tokens, sampling)
            self.tokens.append(int(inverse_cdf_sample(probs[None], np.array([draw()]), np)[0]))
            self._trim(len(self.tokens) - 1, (name,))
            yield self.tokens[-1]

    def cache_lengths(self) -> dict[str, int]:
        return dict(self.lengths) | {name: index.length for name, index in self.lookups.items()}

    def remember(self) -> None:
        """Its drafters learn nothing from earlier outputs."""

    def account(self) -> dict[str, Any]:
        return {}


def _ranked(rows: np.ndarray, n: int) -> list[list[tuple[int, float]]]:
    """Each row's n most likely (token id, p), most likely first."""
    order = np.argsort(-rows, axis=-1, kind="stable")[:, :n]
    return [[(int(t), float(row[t])) for t in ids] for row, ids in zip(rows, order, strict=True)]


class ScriptedBackend:
    """A target and named drafters (models, or prompt lookup as (n_min, n_max)) over bytes."""

    capabilities = SCRIPTED
    context_length: int | None = None

    def __init__(
        self,
        target: ScriptedModel,
        drafters: Sequence[ScriptedModel] = (),
        lookups: Mapping[str, tuple[int, int]] | None = None,
        eos_token_ids: frozenset[int] = frozenset({EOS}),
    ) -> None:
        self.models = {"target": target} | {d.name: d for d in drafters}
        self.lookups = dict(lookups or {})
        self.drafters = (*(d.name for d in drafters), *self.lookups)
        self.eos_token_ids = eos_token_ids
        self.clock = SimulatedClock()
        self.forwards: list[tuple[str, int]] = []
        """Every forward pass as (model, rows scored), in order."""
        self.generations: list[ScriptedGeneration] = []

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        if raw:
            return encode_bytes(raw_text(prompt, earlier))
        turns = "".join(f"user: {e.prompt}\nassistant: {e.answer}\n" for e in earlier)
        return encode_bytes(f"{turns}user: {prompt}\nassistant: ")

    def detokenizer(self) -> ByteDetokenizer:
        return ByteDetokenizer()

    def token_text(self, token_id: int) -> str:
        return bytes([token_id]).decode("utf-8", "replace") if token_id < 256 else ""

    def open_generation(
        self,
        prompt_token_ids: Sequence[int],
        prefill: Sequence[str | None] = (None,),
        previous: Generation | None = None,
    ) -> ScriptedGeneration:
        if isinstance(previous, ScriptedGeneration):
            generation = previous
            generation.go_on_with(prompt_token_ids)
        else:
            generation = ScriptedGeneration(self, prompt_token_ids)
        for name in prefill:
            generation.prefill(name or "target")
        self.generations.append(generation)
        return generation

    def describe(self) -> dict[str, Any]:
        return {"backend": "scripted", "models": {name: {"kind": "scripted"} for name in self.models}}

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        logits = self.models["target"].logits
        context = list(prompt_token_ids)
        out = []
        for token in token_ids:
            row = logits(context)
            out.append(float(row[token] - np.logaddexp.reduce(row[np.isfinite(row)])))
            context.append(token)
        return out

    def close(self) -> None:
        """Nothing to release."""


TARGET_SEED = 0


def scripted_backend(
    cost: Cost | None = None, drafters: Sequence[str] = ("near", "far", "self", "lookup")
) -> ScriptedBackend:
    """The tests' usual set (or the `drafters` named of it): the target, `near` (the target plus
    noise: accepted often, not always), `far` (a model of its own: rarely accepted), `self` (the
    target itself: always) and `lookup` (prompt lookup, n from 1 to 3). A drafter costs a fifth
    of the target's `cost` (`self`, all of it)."""
    cost = cost or Cost()
    target = seeded(TARGET_SEED)
    fifth = Cost(step_ms=cost.step_ms / 5, row_ms=cost.row_ms / 5, wall_ms=cost.wall_ms / 5)
    models = {
        "near": ScriptedModel("near", noisy(target, seed=3, noise=1.0), fifth),
        "far": ScriptedModel("far", seeded(1), fifth),
        "self": ScriptedModel("self", target, cost),
    }
    return ScriptedBackend(
        ScriptedModel("target", target, cost),
        [models[name] for name in drafters if name in models],
        lookups={"lookup": (1, 3)} if "lookup" in drafters else None,
    )


def scripted_engine(backend: ScriptedBackend | None = None, **routing: Any) -> SpecEngine:
    """The engine over a scripted backend, timed by its simulated clock; `routing`: `routing_for`'s."""
    backend = backend or scripted_backend()
    return SpecEngine(backend, routing_for(backend.drafters, **routing), clock=backend.clock)
