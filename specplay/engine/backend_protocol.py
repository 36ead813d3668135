"""What the engine needs from a backend. The engine owns every random draw and every decision;
a backend runs the models, keeps their caches, and reports the numbers acceptance needs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from specplay.engine.capabilities import Capabilities
from specplay.engine.conversation import Exchange
from specplay.engine.draws import RoundDraws
from specplay.engine.rules import AcceptanceRule
from specplay.engine.settings import SamplingParams
from specplay.engine.tree import TreeShape, VerifiedDraft


class Detokenizer(Protocol):
    """Streaming detokenizer: text arrives per token, multi-byte characters on their last byte."""

    def add_token(self, token: int) -> None: ...

    def finalize(self) -> None: ...

    @property
    def last_segment(self) -> str: ...


class Generation(Protocol):
    """One sequence being generated: its committed tokens and the model caches behind them.
    (The playground's lanes and a session's lanes are columns of a run; each runs one of these.)"""

    tokens: list[int]
    """Prompt and committed tokens."""

    def draft(
        self,
        drafter: str,
        shape: TreeShape,
        sampling: SamplingParams,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
    ) -> Any:
        """Draft a tree within `shape` after `tokens` (tree.py's shape and children; node i drawn
        with uniforms[i]); width 1 is a chain of up to `shape.depth` tokens. A drafter that proposes
        a single chain (prompt lookup) drafts that chain at any width. When given,
        `keep_drafting(confidences)` is asked after each token of a chain, confidences being the
        drafter's probabilities of its own tokens so far. Wider than 1 only where the capabilities
        say `trees`. Returns once the drafted tokens exist."""
        ...

    def given_draft(self, tokens: Sequence[int]) -> Any:
        """A chain of exactly `tokens`, certain as prompt lookup's (one-hot at every temperature),
        for `verify`: empty for a round that drafts nothing (the `none` route, k = 0), any tokens
        to time the verify pass over that many rows whatever the drafters can draft."""
        ...

    def verify(
        self, draft: Any, sampling: SamplingParams, rule: AcceptanceRule, draws: RoundDraws, top_n: int = 0
    ) -> VerifiedDraft:
        """Score every node of the draft in one target pass (each attends to the context and its
        ancestors; a chain's pass is the causal one), with what `rule` reads (only the rules the
        capabilities list) and, where a node has siblings, tree.py's lossless numbers; row tokens
        drawn with `draws`. With `top_n` > 0 (only where the capabilities say `top_n`), also
        report each distribution's top_n tokens. The drafter's note on where its draft came from
        goes with it (`VerifiedDraft.origin`), where it gave one. `commit` then keeps the kept
        path's cache entries."""
        ...

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
        """What `drafter` would propose after `tokens` with the round's draws, verified by the
        target, every cache left as it was: nothing is committed (only where the capabilities say
        `counterfactual`)."""
        ...

    def commit(self, tokens: Sequence[int]) -> None:
        """Append the round's committed tokens and rewind every cache to them."""
        ...

    def proposal(self, drafter: str, k: int) -> list[int] | None:
        """What `drafter` would draft now if its proposal costs nothing (prompt lookup: a few
        dictionary reads), every cache left alone; None for a drafter that must compute to say."""
        ...

    def catch_up(self, drafter: str) -> int:
        """Bring `drafter`'s cache to the committed tokens but the last (as a prefill would), after
        rounds another drafter served; returns how many tokens it took in (0 where it keeps no
        cache on this machine: a server's prefix cache is the server's)."""
        ...

    def generate(
        self, model: str | None, sampling: SamplingParams, draw: Callable[[], float], pipeline: bool = True
    ) -> Iterator[int]:
        """Autoregressive tokens from the target (None) or a drafter, each committed before it is
        yielded; `draw()` supplies each token's uniform. With `pipeline` the next token computes
        while this one is yielded. Closing it rewinds work in flight."""
        ...

    def cache_lengths(self) -> dict[str, int]:
        """Tokens held by each model's cache, by model name ("target" for the target)."""
        ...

    def remember(self) -> None:
        """The generation ended with text the target wrote (a speculative or target-only lane's):
        drafters that learn from earlier outputs (suffix decoding) take in its committed tokens,
        those after its prompt. Called once as it ends, cut short or not; nothing elsewhere."""
        ...

    def account(self) -> dict[str, Any]:
        """What only the backend knows about this generation so far (which verify strategies ran,
        whether every judged position was exact...) as {backend's name: its record}; the engine merges it
        into the DoneEvent's metrics. {} when there is nothing to add."""
        ...


class Backend(Protocol):
    """Models that can draft and verify; `SpecEngine` makes it an event stream."""

    drafters: tuple[str, ...]
    eos_token_ids: frozenset[int]
    capabilities: Capabilities
    """What it can do beyond drafting and verifying: top-N reports, scoring, whether wall time is a speed."""
    context_length: int | None
    """Tokens the target attends over at most, prompt included (None: it does not say)."""

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        """Prompt to token ids: through the chat template when there is one, unless `raw`; after
        the conversation's `earlier` turns (conversation.py), when it has some."""
        ...

    def detokenizer(self) -> Detokenizer: ...

    def token_text(self, token_id: int) -> str:
        """One token's text, for views (the draft tape, drill-down); safe from any thread."""
        ...

    def open_generation(
        self,
        prompt_token_ids: Sequence[int],
        prefill: Sequence[str | None] = (None,),
        previous: Generation | None = None,
    ) -> Generation:
        """Caches for one generation; the models in `prefill` (None: the target) process the
        prompt now, the others when first used. `previous`, an earlier generation of this backend
        that ended (a conversation's last turn), may give its caches: what they hold of the
        tokens it shares with this prompt is not computed again. A backend whose caches live
        elsewhere (a server's prefix cache) opens fresh ones."""
        ...

    def describe(self) -> dict[str, Any]:
        """Backend and model identity for session files: sources, hashes, addresses; never a secret."""
        ...

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """The target's log-probability, at temperature 1, of each of `token_ids` after the prompt
        (where the capabilities say `scoring`)."""
        ...

    def close(self) -> None:
        """Release connections; called on the model thread as it ends."""
        ...
