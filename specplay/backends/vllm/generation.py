"""Inspection mode: specplay runs the round loop, vLLM servers compute.

Per round: one draft request to the drafter's server (or a local MLX drafter) and one verify
request to the target's server, by one of two strategies:

- `prompt-logprobs` (A): the context plus the draft as one prompt with `prompt_logprobs`; exact
  p_target of every drafted token, but vLLM recomputes the whole context (no prefix cache).
- `prefixes` (B): the k + 1 prefixes batched in one request with sample `logprobs`; keeps the
  prefix cache, for long contexts. A drafted token outside a row's top-K is resolved with one
  `logprob_token_ids` request.

Temperature 0 is exact (ranks decide). Above it only the top-K of p_target is known: the TV
distance is bracketed, the engine gets the upper end so its theta keeps the budget guaranteed, and
each position carries the bound on its residual's error (topk.py).

With `exact_correction` the correction is drawn instead by rejection from target samples (exact.py),
lazily: only the position the engine reads, the first rejected one, makes the extra requests. It
applies where the numbers the draws need are exact: p_target(y) as the server reports it (processed
logprobs, or temperature 1 without filters) and p_draft (`VllmDraft.exact`). Error bounds are
computed before judging, per position: there the residual's part becomes the (tiny) chance that
SAMPLE_CAP draws are all refused and the top-K residual stands in (exact.capped_bound); any part
from tempering top-K numbers stays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.exact import (
    ACCEPT_STREAM,
    SAMPLE_CAP,
    LazyCorrections,
    Sample,
    capped_bound,
    p_draft_range,
    rejection_draw,
    reported_probs_exact,
)
from specplay.backends.vllm.protocol import Choice
from specplay.backends.vllm.remote import RemoteModel
from specplay.backends.vllm.report import EXACT_KEYS
from specplay.backends.vllm.topk import (
    TopK,
    from_logprobs,
    inverse_cdf_draw,
    processed,
    residual,
    residual_error_bound,
    tv_bracket,
)
from specplay.config.run_config import Strategy
from specplay.engine.correction_rank import listed_rank
from specplay.engine.draws import RoundDraws
from specplay.engine.rules import AcceptanceRule
from specplay.engine.settings import SamplingParams
from specplay.engine.tree import TreeShape, VerifiedDraft, chain_verified
from specplay.errors import ConfigError

TIE_LOGPROB = 1e-3
"""How far below the most likely listed logprob a token a server ranks first may be (ties, rounding)."""
LONG_CONTEXT = 2048
"""From this many context tokens `auto` verifies by prefixes, which keeps vLLM's prefix cache."""
STREAM_CHUNK = 256  # tokens asked for per streamed request in target-only and draft-only runs

if TYPE_CHECKING:  # local drafters run on MLX, loaded only when a configuration has one
    from specplay.backends.vllm.local import LocalDraftCache, LocalDrafter


def seed_of(uniform: float) -> int:
    """A server seed from one of the engine's uniforms: the same run asks for the same samples."""
    return int(uniform * 2**31)


@dataclass
class VllmDraft:
    drafter: str
    tokens: list[int]
    p_draft: list[TopK] | None
    """Each drafted position's distribution (None when greedy)."""
    exact: bool
    ranked: list[TopK] | None = None
    """Each position's listing its correction is ranked in (engine/correction_rank.py): p_draft, or at
    temperature 0 the drafter's raw top logprobs; None where not known."""
    listed_at_least: int = 0
    """How many of the most likely tokens every listing in `ranked` holds."""


class CorrectionRanks(Sequence[int | None]):
    """Each correction's rank in its position's listing, found when read: reading one reads its
    correction, which an exact correction draws only then (the engine reads the first rejected)."""

    def __init__(self, corrections: Sequence[int], ranked: Sequence[TopK], listed_at_least: int) -> None:
        self.corrections, self.ranked, self.listed_at_least = corrections, ranked, listed_at_least

    def __len__(self) -> int:
        return len(self.ranked)

    @overload
    def __getitem__(self, index: int) -> int | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[int | None]: ...

    def __getitem__(self, index: int | slice) -> int | list[int | None] | None:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = range(len(self))[index]
        return listed_rank(dict(self.ranked[i].probs), self.corrections[i], self.listed_at_least)


@dataclass
class _Target:
    """What verification learned at one position (drafted positions, then the bonus position)."""

    dist: TopK | None
    """Processed p_target (None when greedy)."""
    argmax: int
    exact: bool
    sample: Sample | None = None
    """The server's own draw here and its reported p_target (prefix verification): a free first
    draw for an exact correction, since it does not depend on the judging."""


@dataclass(frozen=True)
class _Rejected:
    """What an exact correction at one drafted position needs."""

    context: list[int]
    """The generation's tokens at verification (one copy per round, shared by its positions)."""
    drafted: list[int]
    position: int
    drafter: str
    target: _Target
    p_draft: TopK
    sampling: SamplingParams
    uniform: float
    """The engine's residual uniform for the position: seeds the server's draws and the local RNG."""
    tv_lower: float

    @property
    def prefix(self) -> list[int]:
        """The context the rejected token was drafted after."""
        return [*self.context, *self.drafted[: self.position]]


class VllmGeneration:
    def __init__(
        self,
        target: RemoteModel,
        remote: dict[str, RemoteModel],
        local: dict[str, LocalDrafter],
        prompt_token_ids: Sequence[int],
        strategy: Strategy,
        exact_correction: bool = False,
    ) -> None:
        self.target, self.remote = target, remote
        self.local: dict[str, LocalDraftCache] = {name: drafter.open() for name, drafter in local.items()}
        self.tokens = list(prompt_token_ids)
        self.strategy = strategy
        self.strategies_run: Counter[str] = Counter()
        """How many rounds each verify strategy ran."""
        self.exact_correction = exact_correction
        self.exact_draws: Counter[str] = Counter()
        """What exact corrections cost: see report.EXACT_KEYS."""
        self.approximate = False
        """Set once any position was judged from top-K only, or a correction came from the top-K
        residual where an exact one was asked for (cap reached)."""

    def remember(self) -> None:
        """No drafter here learns from earlier outputs (suffix decoding runs on MLX)."""

    def account(self) -> dict[str, Any]:
        """This generation's own account, under "vllm" in its DoneEvent's metrics (report.py reads it)."""
        exact = {key: self.exact_draws[key] for key in EXACT_KEYS} if self.exact_correction else None
        return {
            "vllm": {
                "verify_strategies": dict(self.strategies_run),
                "approximate": self.approximate,
                "exact_correction": exact,
            }
        }

    # --- drafting -------------------------------------------------------------------------------

    def draft(
        self,
        drafter: str,
        shape: TreeShape,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> VllmDraft:
        """A chain of up to `shape.depth` tokens: a server verifies chains only (its capabilities
        say no trees)."""
        k = shape.depth
        if drafter in self.local:
            from specplay.backends.vllm.local import MAX_LISTED  # loaded with the local drafter

            tokens, dists = self.local[drafter].draft(self.tokens, k, sampling, uniforms, keep_drafting)
            return VllmDraft(drafter, tokens, dists, True, ranked=dists, listed_at_least=MAX_LISTED)
        model = self.remote[drafter]
        (choice,) = model.complete(self.tokens, k, sampling, seed_of(uniforms[0]))
        tokens = choice.token_ids[:k]
        if len(choice.top_logprobs) < len(tokens):
            raise VllmError(f"{model.where} returned logprobs for fewer tokens than it generated")
        listed = [from_logprobs(top, model.top_logprobs) for top in choice.top_logprobs[: len(tokens)]]
        if keep_drafting is not None:
            # The server drafts all k at once; the policy's stop is applied afterwards, same tokens.
            confidences: list[float] = []
            for i, (token, dist) in enumerate(zip(tokens, listed, strict=True)):
                confidences.append(dist.probs.get(token, 0.0))
                if not keep_drafting(confidences):
                    tokens, listed = tokens[: i + 1], listed[: i + 1]
                    break
        if sampling.greedy:
            return VllmDraft(drafter, tokens, None, True, ranked=listed, listed_at_least=model.top_logprobs)
        pairs = [processed(d, sampling, model.vocab_size, model.raw_logprobs) for d in listed]
        dists = [d for d, _ in pairs]
        return VllmDraft(
            drafter, tokens, dists, all(exact for _, exact in pairs), ranked=dists, listed_at_least=model.top_logprobs
        )

    def given_draft(self, tokens: Sequence[int]) -> VllmDraft:
        """Certain tokens: each position's distribution is one-hot, with nothing unlisted."""
        return VllmDraft("", list(tokens), [TopK({token: 1.0}, 0.0, 0.0) for token in tokens], True)

    # --- verification ---------------------------------------------------------------------------

    def _pick_strategy(self) -> str:
        if self.strategy != "auto":
            return self.strategy
        return "prefixes" if len(self.tokens) >= LONG_CONTEXT else "prompt-logprobs"

    def verify(
        self, draft: VllmDraft, sampling: SamplingParams, rule: AcceptanceRule, draws: RoundDraws, top_n: int = 0
    ) -> VerifiedDraft:
        """`top_n` is never asked of this backend (its capabilities say no top-N reports), nor a
        rule that needs full distributions: one judged from d has its theta * d accounted by the
        engine from the TV bracket."""
        assert not rule.full_distributions, f"the vLLM backend cannot judge {rule.name}: it needs full distributions"
        # Nothing drafted (the none route): one completion of the context, which the server's
        # prefix cache serves; prompt logprobs would recompute the whole prompt for no row.
        strategy = self._pick_strategy() if draft.tokens else "prefixes"
        self.strategies_run[strategy] += 1
        seed = seed_of(draws.bonus)
        if strategy == "prompt-logprobs":
            targets, bonus = self._verify_prompt_logprobs(draft, sampling, seed)
        else:
            targets, bonus = self._verify_prefixes(draft, sampling, seed)
        if sampling.greedy:
            verified = self._greedy(draft.tokens, targets, bonus)
        else:
            verified = self._sampled(draft, targets, bonus, draws.residual, sampling)
        if draft.ranked is None:
            return verified
        return replace(
            verified, correction_rank=CorrectionRanks(verified.row_tokens, draft.ranked, draft.listed_at_least)
        )

    def _verify_prompt_logprobs(
        self, draft: VllmDraft, sampling: SamplingParams, seed: int
    ) -> tuple[list[_Target], int]:
        model = self.target
        rows, choice = model.prompt_rows(self.tokens, draft.tokens, sampling, seed, model.top_logprobs)
        targets = []
        for row in rows:
            ranked = min(row, key=lambda t: (row[t][1] if row[t][1] > 0 else 10**9, -row[t][0]))
            best = max(row, key=lambda t: row[t][0])
            if row[best][0] > row[ranked][0] + TIE_LOGPROB:  # the rank is the greedy argmax: never follow a lie
                raise VllmError(
                    f"{model.where} ranked token {ranked} first in prompt_logprobs but gave token {best} a higher "
                    "logprob: its prompt_logprobs ranks and logprobs disagree; is it a vLLM server?"
                )
            raw = from_logprobs({t: lp for t, (lp, _) in row.items()}, model.top_logprobs)
            # prompt_logprobs are always raw, whatever the server's --logprobs-mode
            dist, exact = (None, True) if sampling.greedy else processed(raw, sampling, model.vocab_size, raw=True)
            targets.append(_Target(dist, ranked, exact))
        return targets, _chosen(choice, model.where, sampling.greedy)

    def _verify_prefixes(self, draft: VllmDraft, sampling: SamplingParams, seed: int) -> tuple[list[_Target], int]:
        model, k = self.target, len(draft.tokens)
        prefixes = [[*self.tokens, *draft.tokens[:i]] for i in range(k + 1)]
        choices = model.complete(prefixes, 1, sampling, seed, num_choices=k + 1)
        raw_rows = [dict(choice.top_logprobs[0]) for choice in choices[:k]]
        missing = {i: t for i, t in enumerate(draft.tokens) if t not in raw_rows[i]}
        if missing and not sampling.greedy:
            self._resolve(missing, prefixes, raw_rows, sampling, seed)
        targets = []
        for i, choice in enumerate(choices[:k]):
            sample = _chosen(choice, model.where, sampling.greedy)
            if sampling.greedy:
                targets.append(_Target(None, sample, True))
                continue
            listed = from_logprobs(raw_rows[i], model.top_logprobs)
            dist, exact = processed(listed, sampling, model.vocab_size, model.raw_logprobs)
            targets.append(_Target(dist, dist.argmax(), exact, _sampled_token(choice)))
        return targets, _chosen(choices[k], model.where, sampling.greedy)

    def _resolve(
        self,
        missing: dict[int, int],
        prefixes: list[list[int]],
        raw_rows: list[dict[int, float]],
        sampling: SamplingParams,
        seed: int,
    ) -> None:
        """Drafted tokens outside their row's top-K: one request for exactly their logprobs."""
        rows = sorted(missing)
        ids = sorted(set(missing.values()))
        choices = self.target.complete(
            [prefixes[i] for i in rows], 1, sampling, seed, num_choices=len(rows), logprob_token_ids=ids
        )
        for row, choice in zip(rows, choices, strict=True):
            found = choice.top_logprobs[0] if choice.top_logprobs else {}
            if missing[row] not in found:
                raise VllmError(
                    f"{self.target.where} ignored logprob_token_ids (it needs vLLM 0.32 or later); "
                    "verify with --vllm-strategy prompt-logprobs instead"
                )
            raw_rows[row][missing[row]] = found[missing[row]]

    def _greedy(self, drafted: list[int], targets: list[_Target], bonus: int) -> VerifiedDraft:
        # Temperature 0: both distributions one-hot. Exact.
        argmax = [t.argmax for t in targets]
        hits = [float(x == a) for x, a in zip(drafted, argmax, strict=True)]
        return chain_verified(
            drafted=list(drafted),
            p_target=hits,
            p_draft=[1.0] * len(drafted),
            tv_distance=[1.0 - h for h in hits],
            target_argmax=argmax,
            corrections=list(argmax),
            bonus=bonus,
        )

    def _sampled(
        self,
        draft: VllmDraft,
        targets: list[_Target],
        bonus: int,
        residual_uniforms: Sequence[float],
        sampling: SamplingParams,
    ) -> VerifiedDraft:
        assert draft.p_draft is not None
        exact = self.exact_correction and draft.exact and reported_probs_exact(sampling, self.target.raw_logprobs)
        p_target, p_draft, tv_lo, tv_hi, bounds = [], [], [], [], []
        draws: list[Callable[[], int]] = []
        context = list(self.tokens) if exact else []  # a copy only where a correction may need it
        for i, (token, target, dist_draft) in enumerate(zip(draft.tokens, targets, draft.p_draft, strict=True)):
            assert target.dist is not None
            lo, hi = tv_bracket(target.dist, dist_draft)
            bound = residual_error_bound(target.dist, dist_draft)
            uniform = float(residual_uniforms[i])
            if exact:
                tv_lower = lo
                bound = capped_bound(bound, tv_lower, hi)
                at = _Rejected(
                    context=context,
                    drafted=draft.tokens,
                    position=i,
                    drafter=draft.drafter,
                    target=target,
                    p_draft=dist_draft,
                    sampling=sampling,
                    uniform=uniform,
                    tv_lower=tv_lower,
                )
                draws.append(partial(self._exact_correction, at))
            else:
                draws.append(_top_k_draw(target.dist, dist_draft, uniform))
            tempered = not (target.exact and draft.exact)
            if tempered:
                bound = min(1.0, bound + target.dist.tail + dist_draft.tail)  # tempering's own uncertainty
            # An exact position's bound is only the cap's chance: approximate only once it happens.
            self.approximate = self.approximate or tempered or (not exact and bound > 0)
            p_target.append(target.dist.probs.get(token, 0.0))
            p_draft.append(dist_draft.probs.get(token, 0.0))
            tv_lo.append(lo)
            tv_hi.append(hi)
            bounds.append(bound)
        corrections: Sequence[int]
        if self.exact_correction:
            corrections = LazyCorrections(draws if exact else [self._counted_inexact(d) for d in draws])
        else:
            corrections = [draw() for draw in draws]  # each top-K draw costs nothing: drawn eagerly
        argmax = [t.argmax for t in targets]
        return chain_verified(
            drafted=list(draft.tokens),
            p_target=p_target,
            p_draft=p_draft,
            tv_distance=tv_hi,
            target_argmax=argmax,
            corrections=corrections,
            bonus=bonus,
            tv_lower=tv_lo,
            error_bound=bounds,
        )

    # --- exact corrections (exact.py) ------------------------------------------------------------

    def _counted_inexact(self, draw: Callable[[], int]) -> Callable[[], int]:
        """Exact asked for, but these settings leave p_target(y) or p_draft only bracketed."""

        def counted() -> int:
            self.exact_draws["inexact"] += 1
            return draw()

        return counted

    def _exact_correction(self, at: _Rejected) -> int:
        """Rejection from target samples at the rejected position; the top-K residual past the cap."""
        seed = seed_of(at.uniform)
        rng = np.random.default_rng([seed, ACCEPT_STREAM])
        free = [at.target.sample] if at.target.sample is not None else []
        draw = rejection_draw(
            sample=lambda first, n: self._target_samples(at, seed + first, n),
            p_draft_of=lambda token: p_draft_range(at.p_draft, token),
            look_up=lambda tokens: self._look_up_draft(at, seed, tokens),
            rng=rng,
            tv_lower=at.tv_lower,
            cap=SAMPLE_CAP,
            free=free,
        )
        if draw.token is not None:
            self.exact_draws["corrections"] += 1
            return draw.token
        self.exact_draws["capped"] += 1
        self.approximate = True
        assert at.target.dist is not None
        return _top_k_draw(at.target.dist, at.p_draft, float(rng.random()))()

    def _target_samples(self, at: _Rejected, seed: int, n: int) -> list[Sample]:
        """n draws of the next token after the prefix. vLLM seeds its n samples seed, seed + 1, ...,
        so a later batch starts at seed + samples asked for before and never repeats one."""
        model = self.target
        choices = model.complete(at.prefix, 1, at.sampling, seed, num_choices=n, n=n)
        self.exact_draws["requests"] += 1
        self.exact_draws["target_requests"] += 1
        self.exact_draws["samples"] += n
        out = []
        for choice in choices:
            sample = _sampled_token(choice)
            if sample is None:
                raise VllmError(f"{model.where} sampled a token without listing its logprob")
            out.append(sample)
        return out

    def _look_up_draft(self, at: _Rejected, seed: int, tokens: Sequence[int]) -> dict[int, float]:
        """Exact p_draft of drawn tokens the drafter did not list."""
        if at.drafter in self.local:
            self.exact_draws["local_lookups"] += 1
            return self._local_p_draft(at, tokens)
        model = self.remote[at.drafter]
        # Only reachable where the drafter's numbers are exact: processed, or raw = processed.
        assert reported_probs_exact(at.sampling, model.raw_logprobs)
        ids = sorted(set(tokens))
        (choice,) = model.complete(at.prefix, 1, at.sampling, seed, logprob_token_ids=ids)
        self.exact_draws["requests"] += 1
        self.exact_draws["drafter_requests"] += 1
        found = choice.top_logprobs[0] if choice.top_logprobs else {}
        if any(token not in found for token in ids):
            raise VllmError(
                f"{model.where} ignored logprob_token_ids (it needs vLLM 0.32 or later); "
                "run without --vllm-exact-correction"
            )
        return {token: from_logprobs({token: found[token]}).probs[token] for token in ids}

    def _local_p_draft(self, at: _Rejected, tokens: Sequence[int]) -> dict[int, float]:
        """A local drafter's row was cut to its most probable tokens: recompute it at the prefix."""
        return self.local[at.drafter].probs_at(at.prefix, self.tokens, at.sampling, tokens)

    # --- committing and single-model runs -------------------------------------------------------

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
        """Never asked of this backend: its capabilities say no counterfactual routes."""
        raise ConfigError("counterfactual", "routes run on the MLX backend only (--backend mlx)")

    def commit(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        for cache in self.local.values():
            cache.trim_to(len(self.tokens) - 1)

    def proposal(self, drafter: str, k: int) -> list[int] | None:
        return None  # every drafter here is a model: a proposal is a forward pass

    def catch_up(self, drafter: str) -> int:
        """A local drafter's cache takes in what it missed; a server drafter's prefix cache is its own."""
        return self.local[drafter].catch_up(self.tokens) if drafter in self.local else 0

    def generate(
        self, model_name: str | None, sampling: SamplingParams, draw: Callable[[], float], pipeline: bool = True
    ) -> Iterator[int]:
        if model_name in self.local:
            yield from self.local[model_name].generate(self.tokens, sampling, draw)
            return
        model = self.target if model_name is None else self.remote[model_name]
        while True:
            seed = None if sampling.greedy else seed_of(draw())
            stream = model.stream(self.tokens, STREAM_CHUNK, sampling, seed)
            try:
                for token in stream:
                    self.tokens.append(token)
                    yield token
            finally:
                stream.close()

    def cache_lengths(self) -> dict[str, int]:
        """Local drafters only: a server's cache is its own."""
        return {name: cache.length for name, cache in self.local.items()}


def _chosen(choice: Choice, where: str, greedy: bool) -> int:
    """The token a verify choice generated, as its own logprobs bear it out (protocol.py checks it is
    listed): at temperature 0 it is the row's argmax, so a server's lie here would be the output."""
    if not choice.token_ids:
        raise VllmError(f"{where} sent no token where one was asked for (empty token_ids); is it a vLLM server?")
    token = choice.token_ids[0]
    listed = choice.top_logprobs[0] if choice.top_logprobs else {}
    best = max(listed, key=listed.__getitem__, default=token)
    if greedy and token in listed and listed[best] > listed[token] + TIE_LOGPROB:
        raise VllmError(
            f"{where} chose token {token} at temperature 0 but gave token {best} a higher logprob: "
            "its token_ids and its logprobs disagree; is it a vLLM server, with nothing rewriting its replies?"
        )
    return token


def _sampled_token(choice: Choice) -> Sample | None:
    """A choice's first generated token and p_target of it as the server reported it (vLLM always
    lists the sampled token's logprob); None if it did not."""
    listed = choice.top_logprobs[0] if choice.top_logprobs else {}
    if not choice.token_ids or choice.token_ids[0] not in listed:
        return None
    token = choice.token_ids[0]
    return token, from_logprobs({token: listed[token]}).probs[token]


def _top_k_draw(p_target: TopK, p_draft: TopK, uniform: float) -> Callable[[], int]:
    """The approximate correction: the top-K residual, drawn with the engine's uniform."""
    token = inverse_cdf_draw(residual(p_target, p_draft), uniform)
    return lambda: token
