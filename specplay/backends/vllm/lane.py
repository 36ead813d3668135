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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.local import LocalDraftCache, LocalDrafter
from specplay.backends.vllm.remote import RemoteModel
from specplay.backends.vllm.topk import (
    TopK,
    from_logprobs,
    inverse_cdf_draw,
    processed,
    residual,
    residual_error_bound,
    tv_bracket,
)
from specplay.engine.backend import VerifiedDraft
from specplay.engine.settings import SamplingParams

Strategy = Literal["auto", "prompt-logprobs", "prefixes"]
STRATEGIES: tuple[Strategy, ...] = ("auto", "prompt-logprobs", "prefixes")
LONG_CONTEXT = 2048
"""From this many context tokens `auto` verifies by prefixes, which keeps vLLM's prefix cache."""
STREAM_CHUNK = 256  # tokens asked for per streamed request in target-only and draft-only runs


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


@dataclass
class _Target:
    """What verification learned at one position (drafted positions, then the bonus position)."""

    dist: TopK | None
    """Processed p_target (None when greedy)."""
    argmax: int
    exact: bool


class VllmLane:
    def __init__(
        self,
        target: RemoteModel,
        remote: dict[str, RemoteModel],
        local: dict[str, LocalDrafter],
        prompt_token_ids: Sequence[int],
        strategy: Strategy,
        strategies_run: Counter[str],
    ) -> None:
        self.target, self.remote = target, remote
        self.local: dict[str, LocalDraftCache] = {name: drafter.open() for name, drafter in local.items()}
        self.tokens = list(prompt_token_ids)
        self.strategy = strategy
        self.strategies_run = strategies_run
        self.approximate = False
        """Set once any position was judged from top-K only."""

    # --- drafting -------------------------------------------------------------------------------

    def draft(
        self,
        drafter: str,
        k: int,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> VllmDraft:
        if drafter in self.local:
            tokens, dists = self.local[drafter].draft(self.tokens, k, sampling, uniforms, keep_drafting)
            return VllmDraft(drafter, tokens, dists, True)
        model = self.remote[drafter]
        (choice,) = model.complete(self.tokens, k, sampling, seed_of(uniforms[0]))
        tokens = choice.token_ids[:k]
        if len(choice.top_logprobs) < len(tokens):
            raise VllmError(f"{model.where} returned logprobs for fewer tokens than it generated")
        listed = [from_logprobs(top) for top in choice.top_logprobs[: len(tokens)]]
        if keep_drafting is not None:
            # The server drafts all k at once; the policy's stop is applied afterwards, same tokens.
            confidences: list[float] = []
            for i, (token, dist) in enumerate(zip(tokens, listed, strict=True)):
                confidences.append(dist.probs.get(token, 0.0))
                if not keep_drafting(confidences):
                    tokens, listed = tokens[: i + 1], listed[: i + 1]
                    break
        if sampling.greedy:
            return VllmDraft(drafter, tokens, None, True)
        pairs = [processed(d, sampling, model.vocab_size, model.raw_logprobs) for d in listed]
        return VllmDraft(drafter, tokens, [d for d, _ in pairs], all(exact for _, exact in pairs))

    # --- verification ---------------------------------------------------------------------------

    def _pick_strategy(self) -> str:
        if self.strategy != "auto":
            return self.strategy
        return "prefixes" if len(self.tokens) >= LONG_CONTEXT else "prompt-logprobs"

    def verify(
        self, draft: VllmDraft, sampling: SamplingParams, residual_uniforms: Sequence[float], bonus_uniform: float
    ) -> VerifiedDraft:
        strategy = self._pick_strategy()
        self.strategies_run[strategy] += 1
        seed = seed_of(bonus_uniform)
        if strategy == "prompt-logprobs":
            targets, bonus = self._verify_prompt_logprobs(draft, sampling, seed)
        else:
            targets, bonus = self._verify_prefixes(draft, sampling, seed)
        if sampling.greedy:
            return self._greedy(draft.tokens, targets, bonus)
        return self._sampled(draft, targets, bonus, residual_uniforms)

    def _verify_prompt_logprobs(
        self, draft: VllmDraft, sampling: SamplingParams, seed: int
    ) -> tuple[list[_Target], int]:
        model, start = self.target, len(self.tokens)
        (choice,) = model.complete([*self.tokens, *draft.tokens], 1, sampling, seed, prompt_logprobs=model.top_logprobs)
        rows = choice.prompt_logprobs
        if rows is None or len(rows) < start + len(draft.tokens):
            raise VllmError(f"{model.where} did not return prompt_logprobs; it needs vLLM 0.6 or later")
        targets = []
        for i, token in enumerate(draft.tokens):
            row = rows[start + i]
            if row is None or token not in row:
                raise VllmError(f"{model.where} left drafted token {token} out of prompt_logprobs")
            ranked = min(row, key=lambda t: (row[t][1] if row[t][1] > 0 else 10**9, -row[t][0]))
            raw = from_logprobs({t: lp for t, (lp, _) in row.items()})
            # prompt_logprobs are always raw, whatever the server's --logprobs-mode
            dist, exact = (None, True) if sampling.greedy else processed(raw, sampling, model.vocab_size, raw=True)
            targets.append(_Target(dist, ranked, exact))
        return targets, choice.token_ids[0]

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
            sample = choice.token_ids[0]
            if sampling.greedy:
                targets.append(_Target(None, sample, True))
                continue
            dist, exact = processed(from_logprobs(raw_rows[i]), sampling, model.vocab_size, model.raw_logprobs)
            targets.append(_Target(dist, dist.argmax(), exact))
        return targets, choices[k].token_ids[0]

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
                    f"{self.target.where} ignored logprob_token_ids (it needs vLLM 0.33 or later); "
                    "verify with --vllm-strategy prompt-logprobs instead"
                )
            raw_rows[row][missing[row]] = found[missing[row]]

    def _greedy(self, drafted: list[int], targets: list[_Target], bonus: int) -> VerifiedDraft:
        # Temperature 0: both distributions one-hot. Exact.
        argmax = [t.argmax for t in targets]
        hits = [float(x == a) for x, a in zip(drafted, argmax, strict=True)]
        return VerifiedDraft(
            list(drafted), hits, [1.0] * len(drafted), [1.0 - h for h in hits], argmax, list(argmax), bonus
        )

    def _sampled(
        self, draft: VllmDraft, targets: list[_Target], bonus: int, residual_uniforms: Sequence[float]
    ) -> VerifiedDraft:
        assert draft.p_draft is not None
        p_target, p_draft, tv_lo, tv_hi, corrections, bounds = [], [], [], [], [], []
        for i, (token, target, dist_draft) in enumerate(zip(draft.tokens, targets, draft.p_draft, strict=True)):
            assert target.dist is not None
            lo, hi = tv_bracket(target.dist, dist_draft)
            bound = residual_error_bound(target.dist, dist_draft)
            if not (target.exact and draft.exact):
                bound = min(1.0, bound + target.dist.tail + dist_draft.tail)  # tempering's own uncertainty
            p_target.append(target.dist.probs.get(token, 0.0))
            p_draft.append(dist_draft.probs.get(token, 0.0))
            tv_lo.append(lo)
            tv_hi.append(hi)
            corrections.append(inverse_cdf_draw(residual(target.dist, dist_draft), float(residual_uniforms[i])))
            bounds.append(bound)
        self.approximate = self.approximate or any(b > 0 for b in bounds)
        argmax = [t.argmax for t in targets]
        return VerifiedDraft(list(draft.tokens), p_target, p_draft, tv_hi, argmax, corrections, bonus, tv_lo, bounds)

    # --- committing and single-model runs -------------------------------------------------------

    def commit(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        for cache in self.local.values():
            cache.trim_to(len(self.tokens) - 1)

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
