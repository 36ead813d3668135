"""One generation's caches on MLX, and the draft / verify / step computations.

Everything here runs on the one MLX thread. Work stays on the device until a round's single
transfer of results to the host; the engine's uniforms come in as a small array, so drafting
needs no host round trip per token (except under a policy that asks after each token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import trim_prompt_cache

from specplay.backends.mlx import kernels
from specplay.backends.mlx.kernels import draw_kernel
from specplay.backends.prompt_lookup import NgramIndex
from specplay.engine.accept import inverse_cdf_sample
from specplay.engine.backend_protocol import VerifiedDraft
from specplay.engine.draws import RoundDraws
from specplay.engine.rules import AcceptanceRule
from specplay.engine.sampling import one_hot, sampling_probs, softmax
from specplay.engine.settings import SamplingParams
from specplay.engine.verify_rows import top_n as top_tokens
from specplay.engine.width import LOGITS, correction_ranks
from specplay.errors import ConfigError, ModelError

PREFILL_CHUNK = 512  # tokens per forward when a cache catches up on a long stretch
CLEAR_EVERY = 256  # return MLX's buffer cache to the system every so many tokens, as mlx-lm does


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

    def __init__(self, name: str, model: Any, cache: list[Any], vocab_size: int) -> None:
        self.name, self.model, self.cache, self.vocab_size = name, model, cache, vocab_size
        self.length = 0

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


@dataclass
class MlxDraft:
    tokens: mx.array  # [k] int; k may be 0 (prompt lookup found no match)
    rows: mx.array | None  # [k, vocab] float32: the drafter's distributions; None where one-hot
    vocab_size: int
    scores: mx.array | None = None
    """[k, vocab]: a greedy model drafter's logits, kept (already computed) to rank corrections in
    (width.py): its softmax would cost an exponential per token of the vocabulary per round."""

    @property
    def p_draft(self) -> mx.array:
        """Built only where verification reads it: greedy lossless verification needs the tokens alone."""
        return self.rows if self.rows is not None else one_hot(self.tokens, self.vocab_size, mx)

    def ranks(self, corrections: mx.array) -> mx.array | None:
        """Each correction's rank among the drafter's tokens (width.py), from its distributions or
        at temperature 0 its logits; None for prompt lookup, which has no second choice."""
        if self.rows is not None:
            return correction_ranks(self.rows, corrections, mx)
        return None if self.scores is None else correction_ranks(self.scores, corrections, mx, floor=LOGITS)


def _uniforms(values: Sequence[float]) -> mx.array:
    return mx.array(np.asarray(values, dtype=np.float32))


def _draw(
    logits: mx.array, sampling: SamplingParams, uniforms: mx.array | None, compiled: bool
) -> tuple[mx.array, mx.array | None]:
    """One token per row of logits, and the distribution it was drawn from (None when greedy:
    the argmax needs no distribution nor draw, and its one-hot is built only where needed)."""
    if sampling.greedy:
        return mx.argmax(logits, axis=-1), None
    assert uniforms is not None, "a sampled draw needs its uniform"
    return draw_kernel(sampling, compiled)(logits, uniforms)


def _ranked(ids: list[list[int]], probs: list[list[float]]) -> list[list[tuple[int, float]]]:
    """Top-n rows as (token id, p) pairs, most likely first."""
    return [sorted(zip(i, p, strict=True), key=lambda c: -c[1]) for i, p in zip(ids, probs, strict=True)]


def _verify_argmax(draft: MlxDraft, logits: mx.array, top_n: int = 0) -> VerifiedDraft:
    """Greedy and lossless: both distributions are one-hot, so every number the engine reads
    follows from the target's argmax at each position (`_verify_distributions` computes the same
    values from the one-hot rows) and no softmax, TV or residual is built; the argmaxes are
    ranked in the drafter's logits. A drill-down's top-n lists of one-hot rows hold one token
    each, with probability 1 (the rest have none)."""
    drafted = draft.tokens
    k = drafted.shape[0]
    argmax_ids = mx.argmax(logits, axis=-1).astype(mx.int32)
    ranked = draft.ranks(argmax_ids[:k]) if k else None
    parts = [drafted.astype(mx.int32), argmax_ids]
    if ranked is not None:
        parts.append(ranked.astype(mx.int32))
    ids = mx.concatenate(parts).tolist()  # the round's one transfer to the host
    tokens, argmax, ranks = ids[:k], ids[k : 2 * k + 1], ids[2 * k + 1 :]
    hits = [float(x == a) for x, a in zip(tokens, argmax, strict=False)]
    verified = VerifiedDraft(
        drafted=tokens,
        p_target=hits,
        p_draft=[1.0] * k,
        tv_distance=[1.0 - h for h in hits],
        target_argmax=argmax[:k],
        corrections=argmax[:k],
        correction_rank=ranks if ranked is not None else None,
        bonus=argmax[k],
    )
    if not top_n:
        return verified
    return replace(verified, top_target=[[(a, 1.0)] for a in argmax], top_draft=[[(x, 1.0)] for x in tokens])


def _verify_distributions(
    draft: MlxDraft,
    logits: mx.array,
    *,
    sampling: SamplingParams,
    rule: AcceptanceRule,
    draws: RoundDraws,
    top_n: int,
    compiled: bool = False,
) -> VerifiedDraft:
    """Verification from both models' full distributions at the k drafted positions (and the
    target's at the bonus position): what sampling, a relaxed rule or a drill-down reads."""
    k = draft.tokens.shape[0]
    u = _uniforms([*draws.residual, draws.bonus])
    n = min(top_n, logits.shape[-1])
    if k == 0:  # nothing drafted: the round is one target step (MLX cannot reduce empty rows)
        p_target = sampling_probs(logits, sampling, mx)
        bonus = inverse_cdf_sample(p_target, u, mx)
        tops = top_tokens(p_target, n, mx) if n else ()
        mx.eval(bonus, *tops)
        verified = VerifiedDraft(
            drafted=[],
            p_target=[],
            p_draft=[],
            tv_distance=[],
            target_argmax=[],
            corrections=[],
            bonus=bonus.tolist()[0],
        )
        return replace(verified, top_target=_ranked(*(t.tolist() for t in tops)), top_draft=[]) if tops else verified
    kernel = kernels.verify_kernel(sampling, rule, n, compiled)
    out = kernel(logits, draft.tokens, draft.p_draft, u)
    # Ranked in the drafter's own rows: at temperature 0 its logits, not the one-hot (prompt lookup: none).
    ranks = out.pop("correction_rank") if draft.rows is not None else draft.ranks(out["corrections"])
    if ranks is not None:
        out["correction_rank"] = ranks
    mx.eval(out)  # the round's one transfer to the host
    stats = {name: value.tolist() for name, value in out.pop("rule_stats", {}).items()}
    host = {name: value.tolist() for name, value in out.items()}
    tops = {}
    if n:
        tops["top_target"] = _ranked(host.pop("top_target_ids"), host.pop("top_target_p"))
        tops["top_draft"] = _ranked(host.pop("top_draft_ids"), host.pop("top_draft_p"))
    return VerifiedDraft(
        drafted=host["drafted"],
        p_target=host["p_target_x"],
        p_draft=host["p_draft_x"],
        tv_distance=host["tv"],
        target_argmax=host["argmax"],
        corrections=host["corrections"],
        correction_rank=host.get("correction_rank"),
        bonus=host["bonus"][0],
        rule_stats=stats,
        tv_spent=host.get("tv_spent"),
        **tops,
    )


class MlxGeneration:
    """Caches for one sequence. Between rounds every cache holds a prefix of `tokens[:-1]`.

    Model and early-exit drafters keep a KV cache (`drafters`); prompt-lookup drafters keep an
    n-gram index of the committed tokens (`lookups`), which a rejection never has to rewind.
    """

    def __init__(
        self,
        target: ModelCache,
        drafters: dict[str, ModelCache],
        prompt_token_ids: Sequence[int],
        lookups: dict[str, NgramIndex] | None = None,
        compiled: bool = False,
    ) -> None:
        self.target, self.drafters = target, drafters
        self.lookups = lookups or {}
        self.compiled = compiled
        """The sampling and acceptance math runs compiled (kernels.py says where that pays)."""
        self.tokens = list(prompt_token_ids)
        self._cleared_at = 0

    def _models(self) -> list[ModelCache]:
        return [self.target, *self.drafters.values()]

    def prefill(self, model: ModelCache | NgramIndex, clear: bool = True) -> int:
        """Bring `model`'s cache to all committed tokens but the last, chunk by chunk, and return
        how many it took in; then empty MLX's buffer cache, as mlx-lm does after a prefill, so a
        generation's steps start from an empty one rather than from the buffers an earlier
        generation left (`clear`: a short catch-up mid-run keeps them)."""
        if isinstance(model, NgramIndex):
            before = model.length
            model.extend(self.tokens, len(self.tokens) - 1)
            return model.length - before
        before = model.length
        while len(self.tokens) - 1 - model.length > 0:
            chunk = self.tokens[model.length : min(model.length + PREFILL_CHUNK, len(self.tokens) - 1)]
            model.forward(mx.array(chunk))
            mx.eval([c.state for c in model.cache])
        if clear:
            self._clear()
        return model.length - before

    def proposal(self, drafter: str, k: int) -> list[int] | None:
        return self.lookups[drafter].propose(self.tokens, k) if drafter in self.lookups else None

    def catch_up(self, drafter: str) -> int:
        if drafter in self.lookups:
            return self.prefill(self.lookups[drafter])
        model = self.drafters[drafter]
        return self.prefill(model, clear=len(self.tokens) - model.length > PREFILL_CHUNK)

    def _pending(self, model: ModelCache) -> mx.array:
        """The tokens `model` has yet to see, the last committed one included."""
        if len(self.tokens) - model.length > PREFILL_CHUNK:
            self.prefill(model)
        return mx.array(self.tokens[model.length :])

    def draft(
        self,
        drafter: str,
        k: int,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> MlxDraft:
        if drafter in self.lookups:
            return self._look_up(self.lookups[drafter], k, keep_drafting)
        model = self.drafters[drafter]
        u = None if sampling.greedy else _uniforms(uniforms)  # the argmax needs no draw
        inputs = self._pending(model)
        tokens, rows, confidences = [], [], []
        for i in range(k):
            logits = model.forward(inputs)[-1:]
            token, probs = _draw(logits, sampling, None if u is None else u[i : i + 1], self.compiled)
            tokens.append(token)
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
        drafted = mx.concatenate(tokens)
        # Wait for the draft, so draft and verify times are measured apart. It costs the device the
        # time the host takes to build the verify graph; on CPUs, where MLX dispatch blocks on work
        # in flight, nothing (benchmarks/vs_mlx_lm).
        mx.eval(drafted)
        stacked = mx.concatenate(rows)  # built lazily: computed only where verification reads it
        if sampling.greedy:
            return MlxDraft(drafted, None, model.vocab_size, scores=stacked)
        return MlxDraft(drafted, stacked, model.vocab_size)

    def given_draft(self, tokens: Sequence[int]) -> MlxDraft:
        return MlxDraft(mx.array(list(tokens), dtype=mx.int32), None, self.target.vocab_size)

    def _look_up(self, index: NgramIndex, k: int, keep_drafting: Callable[[Sequence[float]], bool] | None) -> MlxDraft:
        """Prompt lookup: the proposal is certain, so its distribution is one-hot at every
        temperature and each rule applies unchanged (lossless acceptance is p_target(x))."""
        proposal = index.propose(self.tokens, k)
        if keep_drafting is not None:
            # The drafter's confidence in each of its tokens is 1, so a policy that stops early
            # never does here; asked anyway so a policy sees every kind alike.
            for count in range(1, len(proposal) + 1):
                if not keep_drafting([1.0] * count):
                    proposal = proposal[:count]
                    break
        return self.given_draft(proposal)

    def verify(
        self, draft: MlxDraft, sampling: SamplingParams, rule: AcceptanceRule, draws: RoundDraws, top_n: int = 0
    ) -> VerifiedDraft:
        k = draft.tokens.shape[0]
        inputs = mx.concatenate([self._pending(self.target), draft.tokens.astype(mx.int32)])
        logits = self.target.forward(inputs)[-(k + 1) :]
        if sampling.greedy and rule.lossless:
            return _verify_argmax(draft, logits, top_n)
        return _verify_distributions(
            draft, logits, sampling=sampling, rule=rule, draws=draws, top_n=top_n, compiled=self.compiled
        )

    def counterfactual(
        self,
        drafter: str,
        *,
        k: int,
        sampling: SamplingParams,
        rule: AcceptanceRule,
        draws: RoundDraws,
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> VerifiedDraft:
        """Another drafter's proposal verified in a target pass of its own (MLX models take one
        sequence per cache, so it cannot share the routed proposal's pass); then the target's and
        that drafter's caches go back to the committed tokens."""
        committed = len(self.tokens) - 1
        draft = self.draft(drafter, k, sampling, draws.draft, keep_drafting)
        verified = self.verify(draft, sampling, rule, draws)
        self.target.trim_to(committed)
        if drafter in self.drafters:
            self.drafters[drafter].trim_to(committed)
        return verified

    def commit(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        for model in self._models():
            model.trim_to(len(self.tokens) - 1)
        self._maybe_clear()

    def _maybe_clear(self) -> None:
        if len(self.tokens) - self._cleared_at >= CLEAR_EVERY:
            self._clear()

    def _clear(self) -> None:
        mx.clear_cache()
        self._cleared_at = len(self.tokens)

    def generate(
        self, model_name: str | None, sampling: SamplingParams, draw: Callable[[], float], pipeline: bool = True
    ) -> Iterator[int]:
        if model_name in self.lookups:
            raise ConfigError(
                "mode",
                f"draft cannot run on {model_name!r}, a prompt-lookup drafter: it only copies where the text "
                "repeats and has no next token of its own otherwise; run it speculative, or route draft-only "
                "runs to a model or early-exit drafter",
            )
        model = self.target if model_name is None else self.drafters[model_name]
        return self._generate(model, sampling, draw, pipeline)

    def _generate(
        self, model: ModelCache, sampling: SamplingParams, draw: Callable[[], float], pipeline: bool
    ) -> Iterator[int]:
        def step(inputs: mx.array) -> tuple[mx.array, mx.array]:
            """The next token ([1]), and whether the logits held a NaN (damaged weights still give
            a token id). The token alone feeds the next step: joining the two into one array for
            a single read cost six more MLX operations a step, each dispatched on the CPU."""
            logits = model.forward(inputs)[-1:]
            if sampling.greedy:
                token = mx.argmax(logits, axis=-1)
            else:
                token = _draw(logits, sampling, _uniforms([draw()]), self.compiled)[0]
            return token, mx.isnan(logits).any()

        # Pipelined as mlx-lm's generate_step: token t + 1 is computing while t goes to the host.
        out = step(self._pending(model))
        following = out
        if pipeline:
            mx.async_eval(*out)
        try:
            while True:
                if pipeline:
                    following = step(out[0])
                    mx.async_eval(*following)
                token, not_a_number = out
                mx.eval(token, not_a_number)  # one wait for both (unpipelined, neither is scheduled yet)
                token_id = token.item()
                if not_a_number.item():
                    who = "the target" if model is self.target else f"drafter {model.name!r}"
                    raise ModelError(f"{who} gave logits that are not numbers; check its weights")
                self.tokens.append(token_id)
                self._maybe_clear()
                yield self.tokens[-1]
                out = following if pipeline else step(token)
        finally:
            model.trim_to(len(self.tokens) - 1)  # forget the step in flight

    def cache_lengths(self) -> dict[str, int]:
        """Tokens in each KV cache, and for prompt lookup, tokens in its n-gram index."""
        return {model.name: model.offset() for model in self._models()} | {
            name: index.length for name, index in self.lookups.items()
        }

    def account(self) -> dict[str, Any]:
        return {}  # every number of a round is exact and in its events
