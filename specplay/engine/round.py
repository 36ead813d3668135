"""One speculative round (Leviathan et al. 2023), a chain being the tree of width 1, in the order
gpt-fast writes it:
  1. draft: the routed drafter proposes a tree within the round's shape (a chain of k tokens at
     width 1), keeping p_draft at each node;
  2. verify: the target scores every node in one forward pass;
  3. judge from the root: a node with no siblings (every node of a chain) is kept iff u < the
     rule's acceptance probability a(x); siblings are judged losslessly, by recursive rejection
     sampling (tree.py);
  4. where no child of a row is kept, its correction is drawn from the residual; after a kept
     leaf, a bonus token is drawn from the target after it;
  5. (the run) commit the tokens, and every cache rewinds to them.
Every draw comes from the engine's seeded stream (RoundDraws), so a seed replays the round. The
run (loop.py) chooses the drafter and the shape, commits and emits events; the round drafts,
verifies, judges and times, and knows nothing of routing or policies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specplay.engine.accept import Verdict, judge
from specplay.engine.backend_protocol import Generation
from specplay.engine.draws import RoundDraws
from specplay.engine.events import Candidate, Counterfactual, DraftPosition, Outcome, TokenSource
from specplay.engine.rules import AcceptanceRule
from specplay.engine.settings import NONE_ROUTE, SamplingParams
from specplay.engine.tree import TreeShape, VerifiedDraft, Walk, sibling_verdict, walk
from specplay.errors import ModelError

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundAsk:
    """What the run asks of one round."""

    drafter: str
    """Who drafts (`none`: nobody, the round is one target step)."""
    shape: TreeShape
    """How large the draft may grow (depth 0: nothing is drafted)."""
    sampling: SamplingParams
    rule: AcceptanceRule
    draws: RoundDraws
    limit: int
    """Tokens the round may commit at most (the run's tokens left)."""
    stops: Callable[[int], bool]
    """Whether a token is an end of text that ends the output (the target's alone)."""
    keep_drafting: Callable[[Sequence[float]], bool] | None = None
    top_n: int = 0
    compare_with: tuple[str, ...] = ()
    """Other drafters whose proposals are judged beside it and never committed (counterfactual routes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundResult:
    """What a round did, its times read from the run's clock."""

    drafted: tuple[int, ...]
    parents: tuple[int, ...]
    positions: tuple[DraftPosition, ...]
    committed: tuple[tuple[int, TokenSource], ...]
    """The tokens to commit, before the run's end of text and token limit cut them."""
    bonus_top_target: tuple[Candidate, ...] | None
    counterfactuals: tuple[Counterfactual, ...]
    drafted_at: float
    verified_at: float
    set_aside_s: float
    """Time the counterfactual routes took, to be taken off the lane's clock: not its own work."""
    origin: str | None = None
    """The drafter's note on where its draft came from (VerifiedDraft.origin)."""

    @property
    def num_accepted(self) -> int:
        return sum(position.kept for position in self.positions)


def run_round(generation: Generation, ask: RoundAsk, now: Clock) -> RoundResult:
    """Steps 1 to 4 of a round over `generation`; `now` is the lane's clock."""
    if ask.drafter == NONE_ROUTE or ask.shape.depth == 0:  # a round that drafts nothing is a target step
        draft = generation.given_draft([])
    else:
        draft = generation.draft(ask.drafter, ask.shape, ask.sampling, ask.draws.draft, ask.keep_drafting)  # 1
    drafted_at = now()
    counterfactuals, set_aside_s = _counterfactuals(generation, ask, now)
    verified = generation.verify(draft, ask.sampling, ask.rule, ask.draws, ask.top_n)  # 2
    verified_at = now() - set_aside_s
    check_numbers(verified, ask.drafter)
    positions, walked = judge_draft(verified, ask)  # 3 and 4
    # The top where a bonus is drawn, after the kept leaf; a round that ended otherwise shows its
    # last row (a chain's: after its last drafted token).
    bonus_row = walked.row if walked.committed[-1][1] == "bonus" else len(verified.drafted)
    return RoundResult(
        drafted=tuple(verified.drafted),
        parents=tuple(verified.parents),
        positions=positions,
        committed=walked.committed,
        bonus_top_target=_top(verified.top_target, bonus_row),
        counterfactuals=counterfactuals,
        drafted_at=drafted_at,
        verified_at=verified_at,
        set_aside_s=set_aside_s,
        origin=verified.origin,
    )


def judge_draft(verified: VerifiedDraft, ask: RoundAsk) -> tuple[tuple[DraftPosition, ...], Walk]:
    """Steps 3 and 4: the walk from the root (tree.py), each node judged by the rule where it has no
    siblings and losslessly among them; every node recorded as a position."""
    greedy = ask.sampling.greedy
    uniforms = ask.draws.accept

    def judge_node(node: int, has_siblings: bool) -> Verdict:
        if has_siblings:
            assert verified.sibling_accept is not None, "a backend verifying siblings reports their numbers"
            return sibling_verdict(verified.sibling_accept[node], uniforms[node], greedy)
        return judge(
            ask.rule,
            greedy=greedy,
            token_id=verified.drafted[node],
            target_argmax=verified.target_argmax[node],
            p_target_x=verified.p_target[node],
            p_draft_x=verified.p_draft[node],
            stats=_stats(verified, node),
            uniform=uniforms[node],
        )

    walked = walk(
        verified.parents,
        verified.drafted,
        judge_node=judge_node,
        row_tokens=verified.row_tokens,
        limit=ask.limit,
        stops=ask.stops,
    )
    positions = tuple(
        _position(verified, node, uniforms[node], verdict, ask.rule) for node, verdict in enumerate(walked.verdicts)
    )
    return positions, walked


def _position(
    verified: VerifiedDraft, node: int, uniform: float, verdict: Verdict | None, rule: AcceptanceRule
) -> DraftPosition:
    """Node `node` as the events record it; `verdict` None where judging never reached it."""
    tv = verified.tv_distance[node]
    row = verified.parents[node] + 1
    outcome: Outcome = "unreached"
    spent = 0.0
    if verdict is not None:
        outcome = ("relaxed" if verdict.relaxed else "accepted") if verdict.accepted else "rejected"
        # A backend that knows the rows reports the rule's TV; mentored decoding's is theta * d.
        spent = verified.tv_spent[node] if verified.tv_spent is not None else verdict.theta * tv
    rank = verified.correction_rank[row] if verified.correction_rank is not None and outcome == "rejected" else None
    return DraftPosition(
        token_id=verified.drafted[node],
        p_target=verified.p_target[node],
        p_draft=verified.p_draft[node],
        uniform=uniform,
        tv_distance=tv,
        theta=rule.theta(tv) if verdict is None else verdict.theta,
        outcome=outcome,
        tv_lower=verified.tv_lower[node] if verified.tv_lower is not None else None,
        error_bound=verified.error_bound[node] if verified.error_bound is not None else None,
        top_target=_top(verified.top_target, row),
        top_draft=_top(verified.top_draft, node),
        accept_probability=None if verdict is None else verdict.probability,
        tv_spent=spent,
        correction_rank=None if rank is None else int(rank),
    )


def _stats(verified: VerifiedDraft, node: int) -> dict[str, float]:
    """What the rule reads at a node beyond its two probabilities: d and what the backend reported."""
    return {"tv": verified.tv_distance[node]} | {name: values[node] for name, values in verified.rule_stats.items()}


def _top(rows: list[list[tuple[int, float]]] | None, i: int) -> tuple[tuple[int, float], ...] | None:
    """Row i of a backend's top-n report, as event data; zero-probability entries (a one-hot's
    filler at temperature 0) say nothing and are dropped."""
    if rows is None or i >= len(rows):
        return None
    return tuple((int(t), float(p)) for t, p in rows[i] if p > 0)


def check_numbers(verified: VerifiedDraft, drafter: str) -> None:
    """A model whose probabilities are not numbers (NaN weights, an overflow) ends the run in one
    line rather than judging with them."""
    for name, values in (("p_target", verified.p_target), ("p_draft", verified.p_draft)):
        # A NaN makes the sum NaN (and min and max unreliable), so the sum is asked first.
        total = sum(values)
        if total != total or (values and (min(values) < 0 or max(values) > 1)):
            who = "the target" if name == "p_target" else f"drafter {drafter!r}"
            raise ModelError(f"{who} gave probabilities that are not numbers in [0, 1]; check its weights")


def _counterfactuals(generation: Generation, ask: RoundAsk, now: Clock) -> tuple[tuple[Counterfactual, ...], float]:
    """Every other drafter's proposal from the same context, judged by the same rule with the same
    draws and never committed; and the time they took, which the lane's clock leaves out."""
    if not ask.compare_with or ask.shape.depth == 0:  # a round that drafts nothing has nothing to compare
        return (), 0.0
    out = []
    began = mark = now()
    for drafter in ask.compare_with:
        verified = generation.counterfactual(
            drafter,
            shape=ask.shape,
            sampling=ask.sampling,
            rule=ask.rule,
            draws=ask.draws,
            keep_drafting=ask.keep_drafting,
        )
        # Never committed: only its accepted length counts, judged as far as the draft goes.
        positions, _ = judge_draft(verified, replace(ask, limit=ask.shape.depth))
        at = now()
        kept = sum(position.kept for position in positions)
        out.append(Counterfactual(drafter, tuple(verified.drafted), kept, 1000 * (at - mark)))
        mark = at
    return tuple(out), mark - began
