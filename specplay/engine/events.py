"""The engine's event stream: the only thing a UI, a session writer or a test sees of a run.

Events are frozen and hold plain Python values, so they can cross threads and become JSON with
`dataclasses.asdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specplay.engine.layout import depths
from specplay.engine.settings import K_LIMIT, RESERVED_ROUTES, ROUTE_SETTINGS, SpecSettings

TokenSource = Literal["accepted", "relaxed", "corrected", "bonus", "target", "draft"]
"""Where a committed token came from. accepted: a draft token the verifier kept. relaxed: kept
only thanks to a relaxed rule, the TV budget or another (lossless acceptance would have rejected
it under the same draw; older sessions call it "budget"). corrected: drawn from the
residual after a rejection (vLLM: recovered). bonus: the target's own token after a fully
accepted round. target / draft: the single model of a non-speculative run."""

Outcome = Literal["accepted", "relaxed", "rejected", "unreached"]
"""A drafted position's fate; positions after the first rejection are never judged."""

KEPT: frozenset[Outcome] = frozenset(("accepted", "relaxed"))
"""The outcomes that keep the drafted token."""

FinishReason = Literal["stop", "length", "cancelled"]

Candidate = tuple[int, float]
"""(token_id, probability): one entry of a distribution's top few, for drill-down views."""


@dataclass(frozen=True, slots=True)
class Token:
    """One committed output token."""

    token_id: int
    text: str
    """Its share of the decoded text; empty while bytes of a character are still held back."""
    source: TokenSource


@dataclass(frozen=True, slots=True)
class DraftPosition:
    """What the verifier knew and decided at one drafted position."""

    token_id: int
    p_target: float
    """p_target(x) for the drafted token x, after sampling settings (one-hot at temperature 0)."""
    p_draft: float
    """p_draft(x), likewise."""
    uniform: float
    """The acceptance draw u: accepted iff u < min(1, pi(x) / p_draft(x))."""
    tv_distance: float
    """d = TV(p_target, p_draft) at this position."""
    theta: float
    """Mentored-decoding interpolation weight min(1, D / d); 0 under the other rules."""
    outcome: Outcome
    tv_lower: float | None = None
    """Set when the backend knew only the top-K: d is then bracketed in [tv_lower, tv_distance]."""
    error_bound: float | None = None
    """Set when the backend knew only the top-K: how far, in TV, this position's emitted token's
    distribution may be from the rule's (None: exact)."""
    top_target: tuple[Candidate, ...] | None = None
    """The most likely tokens of p_target here, most likely first; only when the request inspects."""
    top_draft: tuple[Candidate, ...] | None = None
    """Likewise for p_draft."""
    accept_probability: float | None = None
    """The rule's probability of keeping the drafted token (None: greedy and lossless, an argmax match)."""
    tv_spent: float | None = None
    """TV(pi, p_target): how far the rule moved this position's output from the target (0 when
    unreached; None in sessions older than the field, where mentored decoding's theta * d holds)."""
    correction_rank: int | None = None
    """At a rejection, the rank of the committed correction among the drafter's tokens (width.py:
    1 its most likely, RANK_TOP_N + 1 outside its top RANK_TOP_N); None elsewhere, where the
    drafter's distribution is not known, and in sessions older than the field."""

    @property
    def kept(self) -> bool:
        return self.outcome in KEPT

    @property
    def spent(self) -> float:
        """The TV this position spent, from sessions of any age."""
        if self.outcome == "unreached":
            return 0.0
        return self.tv_spent if self.tv_spent is not None else self.theta * self.tv_distance


@dataclass(frozen=True, slots=True)
class Counterfactual:
    """What another drafter would have done in a round: its proposal from the same committed
    tokens, judged by the same rule with the same draws, never committed."""

    drafter: str
    drafted: tuple[int, ...]
    num_accepted: int
    """Its accepted length: drafted tokens kept before the first rejection."""
    elapsed_ms: float
    """Its drafting and verifying; left out of the lane's times and tokens/s."""


@dataclass(frozen=True, slots=True)
class StartEvent:
    mode: str
    drafter: str | None
    """The drafter serving the request at its start, whatever the route setting that chose it
    (`none`: no speculation; None in target mode)."""
    auto_route: str | None
    """The router's choice for this prompt, used whenever the route setting is 'auto'."""
    prompt_token_ids: tuple[int, ...]
    seed: int
    settings: SpecSettings
    """The settings in force at the first round."""


@dataclass(frozen=True, slots=True)
class ControlEvent:
    """Live changes that take effect from the token at `token_index`."""

    token_index: int
    changes: tuple[tuple[str, Any, Any], ...]
    """(setting, old value, new value) for each setting that changed."""


@dataclass(frozen=True, slots=True)
class RoundEvent:
    """One draft-then-verify round of speculative decoding."""

    index: int
    token_index: int
    """Index, in the generated tokens, of the round's first committed token."""
    drafter: str
    """The drafter that served the round (`none`: no speculation), whatever the route setting."""
    drafted: tuple[int, ...]
    """The round's draft, a tree's nodes breadth first (a chain's tokens in order); empty where
    the tokens are not known (a speculating server's round)."""
    parents: tuple[int, ...]
    """Each drafted node's parent (engine/layout.py): -1, 0, 1, ... for a chain. The draft's shape,
    known even where its tokens are not."""
    positions: tuple[DraftPosition, ...]
    """What the verifier knew and decided at each drafted node."""
    num_accepted: int
    tokens: tuple[Token, ...]
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    """Host work: acceptance, cache rewind, detokenizing, bookkeeping."""
    bonus_top_target: tuple[Candidate, ...] | None = None
    """The top of p_target after the last drafted token (where a bonus is drawn); only when the
    request inspects."""
    counterfactuals: tuple[Counterfactual, ...] = ()
    """The other drafters' proposals this round, when counterfactual routes are on."""
    catch_up_ms: float = 0.0
    """The part of draft_ms in which the drafter's cache took in the tokens committed while
    other drafters served (a route switch); 0 when it drafted the round before."""
    catch_up_tokens: int = 0
    """Tokens its cache took in then (0 where the backend keeps no cache of it here)."""
    k_asked: int | None = None
    """The draft length asked for: the policy's k, within the tokens left (0 on the none route);
    None where it is not known (a speculating server's round, a session saved before it was
    recorded). Beside `depth`, it tells a cut round from a short proposal."""
    origin: str | None = None
    """The drafter's note on where its draft came from, for the drill-down (suffix decoding: which
    earlier output or this request, matched on how many tokens); None where the drafter says
    nothing (a model drafts from its weights) and in sessions older than the field."""

    @property
    def nodes(self) -> int:
        """Tokens drafted this round (a tree's nodes); the verify pass scored one row more."""
        return len(self.parents)

    @property
    def depth(self) -> int:
        """The draft's longest path, the draft length: at most `k_asked`, less where the policy
        stopped early or a proposal found fewer (prompt lookup)."""
        return max(depths(self.parents), default=0)


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One token of a target-only or draft-only run."""

    token_index: int
    drafter: str | None
    """The drafter writing a draft-only lane (None in target mode)."""
    token: Token
    step_ms: float


@dataclass(frozen=True, slots=True)
class DoneEvent:
    finish_reason: FinishReason
    token_ids: tuple[int, ...]
    """Generated tokens; an EOS that ended the run is not among them."""
    text: str
    metrics: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RecolourEvent:
    """A remote speculator's last word on where each token so far came from. vLLM's native mode
    streams tokens whose sources can only be guessed from chunk sizes; its per-step arrays,
    when the server sends them, arrive with the last chunk and replace the guess."""

    sources: tuple[TokenSource, ...]
    """One per generated token so far, in order."""
    exact: bool
    """From the server's per-step accounting (True) or still the chunk-size heuristic (False)."""


ROUND_MS_MAX = 3_600_000.0
"""An hour: no round takes longer; a session's larger time is damage, and sums of such overflow
to infinity (a recommendation of "nan ms → nan×")."""


def round_fault(event: RoundEvent) -> str | None:
    """What makes a saved round one no run produces (damage or hand edits), or None: a time outside
    0..ROUND_MS_MAX ms, counts no round has, a route setting as its drafter; in its counterfactuals
    likewise, and `none` or a route setting among them (they are drafters judged beside it). What
    reads rounds to predict or to learn from (costs, router training) leaves such a session out."""
    if event.drafter in ROUTE_SETTINGS:
        return f"round {event.index}'s drafter is {event.drafter!r}, a route setting rather than a drafter"
    times = {
        "draft_ms": event.draft_ms,
        "verify_ms": event.verify_ms,
        "overhead_ms": event.overhead_ms,
        "catch_up_ms": event.catch_up_ms,
    }
    for name, value in times.items():
        if not 0 <= value <= ROUND_MS_MAX:  # NaN fails both
            return f"round {event.index}'s {name} is {value:g} ms, not a round's time (0 ms to an hour)"
    if not 0 <= event.nodes <= K_LIMIT:
        return f"round {event.index} drafted {event.nodes} nodes, not a number of drafts (0 to {K_LIMIT})"
    if not 0 <= event.num_accepted <= event.depth:
        return f"round {event.index}'s num_accepted is {event.num_accepted}, not 0 to its depth {event.depth}"
    for other in event.counterfactuals:
        which = f"round {event.index}'s counterfactual drafter {other.drafter!r}"
        if other.drafter in RESERVED_ROUTES or other.drafter == event.drafter:
            return f"{which} is not one of the other drafters a run judges beside the round's"
        if not 0 <= other.elapsed_ms <= ROUND_MS_MAX:
            return f"{which}: its elapsed_ms is {other.elapsed_ms:g} ms, not a round's time (0 ms to an hour)"
        drafted = min(len(other.drafted), K_LIMIT)
        if not 0 <= other.num_accepted <= drafted:
            return f"{which}: its num_accepted is {other.num_accepted}, not 0 to its {drafted} drafted tokens"
    return None


Event = StartEvent | ControlEvent | RoundEvent | StepEvent | RecolourEvent | DoneEvent


def draft_size(event: RoundEvent) -> str:
    """A round's draft in words, as every view says it: "k 4" for a draft whose nodes are its
    depth (a chain), "depth 3, 6 nodes" where some had siblings."""
    return f"k {event.depth}" if event.nodes == event.depth else f"depth {event.depth}, {event.nodes} nodes"
