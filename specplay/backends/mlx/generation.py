"""One generation's caches on MLX, and the draft / verify / step computations.

Everything here runs on the one MLX thread. Work stays on the device until a round's single
transfer of results to the host; the engine's uniforms come in as a small array, so drafting
needs no host round trip per token (except under a policy that asks after each token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import mlx.core as mx

from specplay.backends.mlx import kernels
from specplay.backends.mlx.drafting import (
    PREFILL_CHUNK,
    Drafter,
    KeepDrafting,
    MlxDraft,
    ModelCache,
    certain_draft,
    uniforms,
)
from specplay.backends.mlx.drafting import draw as draw_token
from specplay.backends.mlx.trees import NO_TREE_PASS, MlxTree, judged_numbers, keep_path, verify_pass
from specplay.engine.accept import inverse_cdf_sample
from specplay.engine.conversation import shared_prefix
from specplay.engine.draws import RoundDraws
from specplay.engine.rules import AcceptanceRule
from specplay.engine.sampling import sampling_probs
from specplay.engine.settings import SamplingParams
from specplay.engine.tree import CHAINS_ONLY, TreeShape, VerifiedDraft, chain_verified, kept_path
from specplay.engine.verify_rows import top_n as top_tokens
from specplay.errors import ConfigError, ModelError

CLEAR_EVERY = 256  # return MLX's buffer cache to the system every so many tokens, as mlx-lm does


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
    verified = chain_verified(
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
    u = uniforms([*draws.residual, draws.bonus])
    n = min(top_n, logits.shape[-1])
    if k == 0:  # nothing drafted: the round is one target step (MLX cannot reduce empty rows)
        p_target = sampling_probs(logits, sampling, mx)
        bonus = inverse_cdf_sample(p_target, u, mx)
        tops = top_tokens(p_target, n, mx) if n else ()
        mx.eval(bonus, *tops)
        verified = chain_verified(
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
    return chain_verified(
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

    Each drafter (drafting.py) keeps its own: a KV cache, or a proposer's index of the committed
    tokens, which a rejection never has to rewind.
    """

    def __init__(
        self,
        target: ModelCache,
        drafters: dict[str, Drafter],
        prompt_token_ids: Sequence[int],
        compiled: bool = False,
    ) -> None:
        self.target, self.drafters = target, drafters
        self.compiled = compiled
        """The sampling and acceptance math runs compiled (kernels.py says where that pays)."""
        self.tokens = list(prompt_token_ids)
        self.prompt_length = len(self.tokens)
        """Where this turn's output starts (a conversation's next turn moves it)."""
        self._cleared_at = 0
        self._chains_only: dict[str, str] = {}
        """Models asked for trees that drafted chains, and why (`account`)."""
        self._tree: tuple[int, MlxTree] | None = None
        """The last verified tree, until its commit: where its nodes' cache entries start, and it."""

    def go_on_with(self, prompt_token_ids: Sequence[int]) -> None:
        """Turn these caches to a conversation's next turn: each keeps what it holds of the tokens
        shared with the new prompt (never the prompt's last, which every cache leaves for the
        next pass), and takes in the rest when prefilled or caught up."""
        keep = min(shared_prefix(self.tokens, prompt_token_ids), len(prompt_token_ids) - 1)
        self.target.trim_to(keep)
        for drafter in self.drafters.values():
            drafter.trim_to(keep)
        self.tokens = list(prompt_token_ids)
        self.prompt_length = len(self.tokens)
        self._tree = None

    def prefill(self, name: str | None, clear: bool = True) -> int:
        """Bring the target's (None) or a drafter's cache to all committed tokens but the last, and
        return how many it took in; then empty MLX's buffer cache, as mlx-lm does after a prefill,
        so a generation's steps start from an empty one rather than from the buffers an earlier
        generation left (`clear`: a short catch-up mid-run keeps them)."""
        taken = self.target.catch_up(self.tokens) if name is None else self.drafters[name].catch_up(self.tokens)
        if clear:
            self._clear()
        return taken

    def proposal(self, drafter: str, k: int) -> list[int] | None:
        return self.drafters[drafter].proposal(self.tokens, k)

    def catch_up(self, drafter: str) -> int:
        return self.prefill(drafter, clear=len(self.tokens) - self.drafters[drafter].length > PREFILL_CHUNK)

    def draft(
        self,
        drafter: str,
        shape: TreeShape,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: KeepDrafting | None,
    ) -> MlxDraft | MlxTree:
        if shape.width > 1 and self.target.tree_pass is None:  # the target verifies chains only
            self._chains_only["target"] = NO_TREE_PASS
            shape = replace(shape, width=1, nodes=shape.depth)
        elif shape.width > 1 and not self.drafters[drafter].grows_trees:
            self._chains_only[drafter] = self.drafters[drafter].chains_because
        return self.drafters[drafter].draft(
            self.tokens, shape, sampling=sampling, drawn=uniforms, keep_drafting=keep_drafting, compiled=self.compiled
        )

    def given_draft(self, tokens: Sequence[int]) -> MlxDraft:
        return certain_draft(tokens, self.target.vocab_size)

    def verify(
        self,
        draft: MlxDraft | MlxTree,
        sampling: SamplingParams,
        rule: AcceptanceRule,
        draws: RoundDraws,
        top_n: int = 0,
    ) -> VerifiedDraft:
        if isinstance(draft, MlxTree):  # a grown tree: the tree pass (trees.py), judged losslessly
            logits, start = verify_pass(self.target, self.tokens, draft)
            self._tree = (start, draft)
            verified = judged_numbers(draft, logits, sampling, draws)
        else:  # a chain: the causal pass, and every rule's numbers
            k = draft.tokens.shape[0]
            inputs = mx.concatenate([self.target.pending(self.tokens), draft.tokens.astype(mx.int32)])
            logits = self.target.forward(inputs)[-(k + 1) :]
            if sampling.greedy and rule.lossless:
                verified = _verify_argmax(draft, logits, top_n)
            else:
                verified = _verify_distributions(
                    draft, logits, sampling=sampling, rule=rule, draws=draws, top_n=top_n, compiled=self.compiled
                )
        return replace(verified, origin=draft.origin) if draft.origin is not None else verified

    def counterfactual(
        self,
        drafter: str,
        *,
        shape: TreeShape,
        sampling: SamplingParams,
        rule: AcceptanceRule,
        draws: RoundDraws,
        keep_drafting: KeepDrafting | None,
    ) -> VerifiedDraft:
        """Another drafter's proposal verified in a target pass of its own (MLX models take one
        sequence per cache, so it cannot share the routed proposal's pass); then the target's and
        that drafter's caches go back to the committed tokens."""
        committed = len(self.tokens) - 1
        draft = self.draft(drafter, shape, sampling, draws.draft, keep_drafting)
        verified = self.verify(draft, sampling, rule, draws)
        self.target.trim_to(committed)
        self.drafters[drafter].trim_to(committed)
        return verified

    def commit(self, tokens: Sequence[int]) -> None:
        if self._tree is not None:  # after a tree: its kept path's cache entries follow the context
            start, tree = self._tree
            keep_path(self.target, start, len(tree.tokens), kept_path(tree.parents, tree.tokens, tokens))
            self._tree = None
        self.tokens.extend(tokens)
        self.target.trim_to(len(self.tokens) - 1)
        for drafter in self.drafters.values():
            drafter.trim_to(len(self.tokens) - 1)
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
        drafter = None if model_name is None else self.drafters[model_name]
        model = self.target if drafter is None else drafter.writer
        if model is None:
            assert drafter is not None
            raise ConfigError(
                "mode",
                f"draft cannot run on {model_name!r}: {drafter.cannot_write}; run it speculative, "
                "or route draft-only runs to a drafter that writes alone (another model, an early exit)",
            )
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
                token = draw_token(logits, sampling, uniforms([draw()]), self.compiled)[0]
            return token, mx.isnan(logits).any()

        # Pipelined as mlx-lm's generate_step: token t + 1 is computing while t goes to the host.
        out = step(model.pending(self.tokens))
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

    def remember(self) -> None:
        output = self.tokens[self.prompt_length :]
        for drafter in self.drafters.values():
            drafter.remember(output)

    def cache_lengths(self) -> dict[str, int]:
        """Tokens in each KV cache, and for a proposer, tokens in its index."""
        return {self.target.name: self.target.offset()} | {name: d.held() for name, d in self.drafters.items()}

    def account(self) -> dict[str, Any]:
        """Every number of a round is exact and in its events; where trees were asked of a model
        that cannot take a tree pass, which drafted chains and why."""
        return {"mlx": {CHAINS_ONLY: dict(self._chains_only)}} if self._chains_only else {}
