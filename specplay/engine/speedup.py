"""How fast speculation should be: α, the acceptance numbers, the cost ratio c and the predicted
speedup, defined once.

The playground, `run`, `bench`, `fidelity` and exports all predict from a speculative lane's
metrics (the engine's names, metrics.py) through `predict`: the same counts and times give the
same α, c and prediction everywhere. What a caller chooses is the yardstick, one target step
measured beside the lane (local) or one verify call (remote, `predict_modelled`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specplay.engine.settings import NONE_ROUTE


def alpha(num_accepted: float, num_judged: float) -> float | None:
    """Per-token acceptance: accepted over judged positions. Leviathan's model accepts each drafted
    token independently with probability α, so a round's judged positions are Bernoulli trials and
    this is α's maximum-likelihood estimate. Positions after a rejection were never tried: the
    draft acceptance rate (accepted over drafted) counts them and underestimates α."""
    return num_accepted / num_judged if num_judged else None


def mean_acceptance_length(num_accepted: float, num_rounds: float) -> float | None:
    """Tokens a round commits on average: its accepted drafts, plus the one token (corrected or
    bonus) every round ends with."""
    return 1 + num_accepted / num_rounds if num_rounds else None


def draft_acceptance_rate(num_accepted: float, num_drafted: float) -> float | None:
    """Accepted over drafted positions, as vLLM reports it (below α: see `alpha`)."""
    return num_accepted / num_drafted if num_drafted else None


def mean_step_ms(total_step_ms: float, num_steps: int) -> float | None:
    """One target step, the yardstick of c and the predicted speedup: the mean step time of a
    target-only lane run beside the speculative one (its StepEvents' step_ms)."""
    return total_step_ms / num_steps if num_steps else None


def measured_speedup(tokens_per_s: float | None, target_tokens_per_s: float | None) -> float | None:
    """The speedup as measured: the speculative lane's tokens/s over the target-only lane's beside
    it. Only where wall time is a speed (the caller knows: Capabilities.wall_time_is_speed)."""
    return tokens_per_s / target_tokens_per_s if tokens_per_s and target_tokens_per_s else None


def predicted_speedup(alpha: float, k: float, cost_ratio: float) -> float:
    """Leviathan et al. (2023): expected tokens per round, (1 - α^(k+1)) / (1 - α), over a round's
    cost in target steps, k c + 1, with c a draft step's cost over a target step's. At α = 1 the
    limit is (k + 1) / (k c + 1)."""
    return tokens_at_alpha(alpha, k) / (k * cost_ratio + 1)


def tokens_at_alpha(alpha: float, k: int | float) -> float:
    """Tokens a round of k drafts commits when each is kept with probability α, independently."""
    return k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass(frozen=True, slots=True)
class Prediction:
    """What a speculative lane's own counts and times predict."""

    alpha: float | None
    mean_k: float | None
    """Tokens drafted per round."""
    cost_ratio: float | None
    """c: one drafted token's time over one target step's (remote: over one verify call's)."""
    speedup: float | None
    """Leviathan's formula from α, k and c."""
    verify_steps: float | None = None
    """A round's verify pass, in target steps: the formula takes it as 1."""
    host_steps: float | None = None
    """A round's host work (acceptance, rewinds, detokenizing), in target steps: the formula takes 0."""
    costed_speedup: float | None = None
    """The formula's expected tokens per round over the round's measured cost, k c + verify + host:
    where the prediction parts from the measurement, this says which term did it."""


def predict(metrics: Mapping[str, Any], target_step_ms: float | None) -> Prediction:
    """From a speculative lane's metrics (num_spec_steps, num_draft_tokens, num_accepted_draft_tokens,
    num_judged_draft_tokens, draft_ms, verify_ms, overhead_ms) and one target-only step as measured
    beside it (None while none has been: no c, no prediction)."""
    rounds = metrics.get("num_spec_steps") or 0
    drafted = metrics.get("num_draft_tokens") or 0
    a = alpha(metrics.get("num_accepted_draft_tokens") or 0, metrics.get("num_judged_draft_tokens") or 0)
    mean_k = drafted / rounds if rounds else None
    draft_ms = metrics.get("draft_ms") or 0.0
    c = None
    # A step of 0 ms or a time below 0 is no measurement (a damaged or edited session): no c.
    if target_step_ms is not None and target_step_ms > 0 and drafted > 0 and draft_ms >= 0:
        c = draft_ms / drafted / target_step_ms
    # Leviathan's formula is a chain's: a tree's nodes are no draft length, its α no chain's.
    chains = not metrics.get("num_tree_rounds")
    if (
        a is None
        or not 0 <= a <= 1
        or mean_k is None
        or mean_k <= 0
        or c is None
        or target_step_ms is None
        or not chains
    ):
        return Prediction(alpha=a, mean_k=mean_k, cost_ratio=c, speedup=None)
    speedup = predicted_speedup(a, mean_k, c)
    verify = (metrics.get("verify_ms") or 0.0) / rounds / target_step_ms
    host = (metrics.get("overhead_ms") or 0.0) / rounds / target_step_ms
    # predicted_speedup's round cost is k c + 1; scale it to k c + verify + host, where the round
    # was timed at all (a session may record 0 ms for every part)
    round_steps = mean_k * c + verify + host
    costed = speedup * (mean_k * c + 1) / round_steps if round_steps > 0 and min(verify, host) >= 0 else None
    return Prediction(
        alpha=a,
        mean_k=mean_k,
        cost_ratio=c,
        speedup=speedup,
        verify_steps=verify,
        host_steps=host,
        costed_speedup=costed,
    )


@dataclass(frozen=True, slots=True)
class RoundAccount:
    """A measured speedup taken apart: the mean round inside the span tokens/s counts (after the
    first token's round, up to the last token's), in target steps. A round's parts add up to the
    time between its tokens and the previous round's, so where the target-only lane's steps are
    timed alike, `speedup` is the measured speedup, and the parts say which one made it."""

    draft_steps: float
    verify_steps: float
    host_steps: float
    tokens: float
    """Tokens per round: those tokens/s counts (all after the first delivery) over the rounds of its span."""

    @property
    def round_steps(self) -> float:
        return self.draft_steps + self.verify_steps + self.host_steps

    @property
    def speedup(self) -> float:
        return self.tokens / self.round_steps if self.round_steps > 0 else 0.0


def round_account(metrics: Mapping[str, Any], target_step_ms: float | None) -> RoundAccount | None:
    """From a speculative lane's `timed_rounds` and `num_tokens`, and one target step as measured
    beside it (on the target-only lane's span alike, `Metrics.add_step`)."""
    timed = metrics.get("timed_rounds") or {}
    rounds = timed.get("rounds") or 0
    if not rounds or not target_step_ms:
        return None
    all_rounds_in_steps = rounds * target_step_ms  # ms over this: each part of a mean round in target steps
    return RoundAccount(
        timed["draft_ms"] / all_rounds_in_steps,
        timed["verify_ms"] / all_rounds_in_steps,
        timed["overhead_ms"] / all_rounds_in_steps,
        timed["tokens"] / rounds,
    )


def predict_modelled(metrics: Mapping[str, Any]) -> Prediction:
    """Remote servers, where no target step is timed on equal terms and wall time is mostly HTTP
    round trips: a verify call (one target forward over k + 1 positions) stands in for a target
    step, so c is one drafted token's time over one verify call's."""
    rounds = metrics.get("num_spec_steps") or 0
    verify_ms = metrics.get("verify_ms") or 0.0
    prediction = predict(metrics, verify_ms / rounds if rounds and verify_ms > 0 else None)
    return replace(prediction, verify_steps=None, host_steps=None, costed_speedup=None)


# --- the speedup at each k, from per-position acceptance and measured round costs ----------------


def reach_by_position(acceptance_per_position: Sequence[float], k: int) -> list[float]:
    """P(drafted tokens 1..i all kept) for i = 1..k. `acceptance_per_position` is the metric of
    that name (kept / drafted at each position over the rounds that drafted that far), which is
    this probability itself; past the positions measured, each further token is kept with the
    last measured conditional rate (position i's kept share over position i - 1's)."""
    measured = list(acceptance_per_position[:k])
    if not measured:
        return [0.0] * k
    last = measured[-1] / measured[-2] if len(measured) > 1 and measured[-2] > 0 else measured[-1]
    last = min(1.0, max(0.0, last))
    while len(measured) < k:
        measured.append(measured[-1] * last)
    return measured


def expected_tokens(acceptance_per_position: Sequence[float], k: int) -> float:
    """Tokens a round of k drafts commits on average: one (the correction or the bonus) plus, for
    each position, the probability that it and every one before it were kept. With one α at every
    position (reach α^i) this is `tokens_at_alpha`."""
    return 1 + sum(reach_by_position(acceptance_per_position, k))


def monotone(verify_ms: Mapping[int, float]) -> dict[int, float]:
    """The verify curve made non-decreasing in rows (pool adjacent violators, each row count
    weighted alike): a forward pass over more rows never costs less, so a dip is noise, and a
    noisy dip would have the prediction favour one k over its neighbours for nothing."""
    rows = sorted(verify_ms)
    blocks: list[list[float]] = []  # [sum, count] of pooled neighbours
    for n in rows:
        blocks.append([verify_ms[n], 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    values = [total / count for total, count in blocks for _ in range(int(count))]
    return dict(zip(rows, values, strict=True))


def round_ms(
    k: int,
    verify_ms: Mapping[int, float],
    draft_step_ms: float,
    host_ms: float = 0.0,
    drafted_share: Sequence[float] | None = None,
    draft_call_ms: float = 0.0,
) -> float | None:
    """A round of k drafts: its draft call (`draft_call_ms`, whatever its length) and drafter
    steps, a verify pass over one row more than it drafted and the host's work around them
    (acceptance bookkeeping, events, text). `drafted_share`: the share of rounds that drafted at
    least i tokens, i = 1..; None: every round drafts k (a model drafter does; prompt lookup drafts
    only what it finds to copy, so its rounds are cheaper and commit less). None where a verify
    pass the round may make was not measured."""
    if drafted_share is None:
        lengths = {k: 1.0}
    else:  # P(a round of k drafts j) = P(drafts >= j) - P(drafts >= j + 1), capped at k
        at_least = [1.0, *reach_by_position(drafted_share, k)]
        lengths = {j: at_least[j] - (at_least[j + 1] if j < k else 0.0) for j in range(k + 1)}
    total = 0.0
    for drafted, share in lengths.items():
        if share <= 0:
            continue
        verify = verify_ms.get(drafted + 1)
        if verify is None:
            return None
        total += share * (drafted * draft_step_ms + verify)
    return total + draft_call_ms + host_ms


@dataclass(frozen=True, slots=True)
class KPrediction:
    """What a k is expected to give, from measured acceptance and measured costs."""

    k: int
    expected_tokens: float
    round_ms: float
    speedup: float
    """Expected tokens per round over a round's time in target steps."""
    break_even_acceptance: float
    """The one α at every position at which a round of this k is as fast as the target alone."""


def predict_by_k(
    acceptance_per_position: Sequence[float],
    verify_ms: Mapping[int, float],
    draft_step_ms: float,
    target_step_ms: float,
    k_max: int,
    host_ms: float = 0.0,
    drafted_share: Sequence[float] | None = None,
    draft_call_ms: float = 0.0,
) -> list[KPrediction]:
    """The prediction for every k from 1 to k_max whose verify pass was measured (the curve taken
    `monotone`). `target_step_ms` is a target-only step as the engine times it (host work
    included), `host_ms` a round's host work (a run's overhead_ms over its rounds), so both sides
    of the ratio count the same things. With `drafted_share` (the share of rounds that drafted at
    least i tokens), `acceptance_per_position` is the share of all rounds that kept i tokens or
    more (`RoundsMeasured.kept_share`), so rounds that drafted less count for what they gave."""
    verify_ms = monotone(verify_ms)
    out = []
    for k in range(1, k_max + 1):
        cost_ms = round_ms(
            k, verify_ms, draft_step_ms, host_ms=host_ms, drafted_share=drafted_share, draft_call_ms=draft_call_ms
        )
        if cost_ms is None or target_step_ms <= 0:
            continue
        tokens = expected_tokens(acceptance_per_position, k)
        steps = cost_ms / target_step_ms
        out.append(KPrediction(k, tokens, cost_ms, tokens / steps, break_even_alpha(k, steps)))
    return out


@dataclass(frozen=True, slots=True)
class TreePrediction:
    """What a draft tree is expected to give beside the chain of as many nodes (the same verify rows)."""

    width: int
    nodes: int
    depth: int
    expected_tokens: float
    round_ms: float
    speedup: float
    chain: KPrediction
    """The chain of `nodes` drafts: a verify pass over as many rows."""

    @property
    def vs_chain(self) -> float:
        return self.speedup / self.chain.speedup if self.chain.speedup > 0 else 0.0


def predict_tree(
    chain: KPrediction,
    *,
    width: int,
    kept_share: Sequence[float],
    draft_round_ms: float,
    host_ms: float,
    verify_ms: Mapping[int, float],
    target_step_ms: float,
) -> TreePrediction | None:
    """A tree of `chain.k` nodes, `width` a level (tree.py's shape), from its own rounds measured
    at that shape: `kept_share[i]`, the share of rounds whose kept path reached depth i + 1, gives
    its tokens per round (1 + their sum, as a chain's `expected_tokens`), and a round costs its
    drafting and host work as measured and a verify pass over as many rows as the chain's. None
    where that pass was not measured."""
    nodes = chain.k
    verify = monotone(verify_ms).get(nodes + 1)
    if verify is None or target_step_ms <= 0:
        return None
    tokens = 1 + sum(kept_share)
    cost_ms = draft_round_ms + verify + host_ms
    depth = -(-nodes // width)
    speedup = tokens / (cost_ms / target_step_ms)
    return TreePrediction(
        width=width, nodes=nodes, depth=depth, expected_tokens=tokens, round_ms=cost_ms, speedup=speedup, chain=chain
    )


def recommended_k(predictions: Sequence[KPrediction]) -> KPrediction | None:
    """The k with the highest predicted speedup (the smaller k on a tie: less to throw away)."""
    return max(predictions, key=lambda p: (p.speedup, -p.k), default=None)


def paying_k(predictions: Sequence[KPrediction]) -> KPrediction | None:
    """The k to set: `recommended_k`'s, where it is predicted faster than the target alone. None
    where no k pays: then the advice is the route none (the target alone), not the least slow k."""
    best = recommended_k(predictions)
    return best if best is not None and best.speedup > 1 else None


def break_even_alpha(k: int, round_steps: float) -> float:
    """The α at which (1 - α^(k+1)) / (1 - α), the tokens a round commits, equals the round's cost
    in target steps: below it speculation at this k is slower than the target alone. 1.0 (and
    above: never) when the round costs k + 1 steps or more."""
    if round_steps <= 1:
        return 0.0
    if round_steps >= k + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):  # the tokens grow with α: bisect to well below any shown precision
        mid = (low + high) / 2
        if tokens_at_alpha(mid, k) < round_steps:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# --- why a run lost: the term of the round account that cost most beyond what it won ------------


@dataclass(frozen=True, slots=True)
class LossReason:
    """Which term of a `RoundAccount` made a measured speedup fall below 1, and one sentence saying so."""

    term: str
    """The term that lost: draft, verify, host, or "nothing drafted" (rounds of no drafts are a
    target step plus overhead)."""
    loss_steps: float
    """What the term cost a round beyond what it won, in target steps (the largest of the three)."""
    sentence: str


def who_drafted(drafted_by: Mapping[str, int], last_route: str | None) -> str:
    """The drafters that drafted a run's drafts (tokens, or a tree's nodes, by drafter), in words,
    most first ("exit", "exit and near"): a run whose route changed to `none` lost on what the
    others drafted. Where none drafted, the route its rounds took ("route none", "lookup")."""
    names = [name for name, n in sorted(drafted_by.items(), key=lambda item: -item[1]) if n > 0]
    if len(names) > 2:
        return f"{names[0]}, {names[1]} and {len(names) - 2} more"
    if names:
        return " and ".join(names)
    if last_route is None:
        return "the drafter"
    return f"route {last_route}" if last_route == NONE_ROUTE else last_route


def loss_reason(
    account: RoundAccount, drafter: str, drafts_per_round: float | None, draft_acceptance_rate: float | None
) -> LossReason | None:
    """Why a round costs more than the tokens it commits (speedup < 1); None where it does not.

    Target alone buys 1 token with 1 target step. A round commits its accepted drafts plus 1 token
    (corrected or bonus), so against that baseline it wins its kept drafts, `tokens - 1`, and pays
    all of drafting, verify beyond one step and all of its host work. Below 1× these payments
    exceed the win. Only drafting buys tokens, so each term's loss is drafting's steps less the
    kept drafts, verify's steps over one, host's steps; the largest one lost. Each sentence's
    comparison holds by that arithmetic: the verify and host sentences name both overheads, since
    only together are they sure to exceed what the drafts win."""
    if account.round_steps <= 0 or account.speedup >= 1:
        return None
    draft, verify, host = account.draft_steps, account.verify_steps, account.host_steps
    kept_per_round = account.tokens - 1
    over_one_step = account.round_steps - 1
    if not drafts_per_round or drafts_per_round < 0.005:  # shows as 0.00: every round was a target step
        sentence = (
            f"{drafter} drafted nothing: a round is one target step plus {over_one_step:.2f}"
            f" steps of overhead (verify {verify:.2f}, host {host:.2f})"
        )
        return LossReason("nothing drafted", over_one_step, sentence)
    losses = {"draft": draft - kept_per_round, "verify": verify - 1, "host": host}
    term = max(losses, key=lambda name: losses[name])  # the first on a tie: drafting, then verify
    if term == "draft":
        steps_per_draft = draft / drafts_per_round
        kept_share = draft_acceptance_rate or 0.0
        sentence = (
            f"{drafter} drafts cost {steps_per_draft:.2f} target steps a token and {kept_share:.0%} are kept:"
            " a round costs more than the tokens it wins"
        )
        return LossReason(term, losses[term], sentence)
    # what the drafts win: with free drafting (prompt lookup) the kept drafts themselves
    won = (
        f"the {kept_per_round:.2f} drafts kept"
        if draft < 0.005
        else f"the drafts win ({kept_per_round:.2f} kept for {draft:.2f} steps)"
    )
    if term == "verify":
        other = f", host {host:.2f}" if host >= 0.005 else ""
        sentence = f"verify costs {verify - 1:.2f} target steps over a step a round{other}: more than {won}"
    else:
        beside_step = f"{verify - 1:.2f} over" if verify >= 1 else f"{1 - verify:.2f} under"
        other = f" (verify {beside_step} one)" if abs(verify - 1) >= 0.005 else ""
        sentence = f"host costs {host:.2f} target steps a round{other}: more than {won}"
    return LossReason(term, losses[term], sentence)
