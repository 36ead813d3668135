"""Draft-length policies: how many tokens the drafter proposes next round.

`fixed`, `acceptance-rate` and `accepted-length` follow mini-vllm-rs's controllers;
`confidence` stops a draft early, SpecDec++-style, from the drafter's own probabilities;
`cost` picks the k (0 included) with the most tokens per second from what the run's rounds cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specplay.engine.settings import PolicyName, PolicyParams, SpecSettings
from specplay.engine.speedup import predict_by_k
from specplay.engine.tree import verify_rows


@dataclass(frozen=True, slots=True)
class RoundTimes:
    """What a judged round cost, as the engine timed it."""

    draft_ms: float
    """Drafting, a catch-up left out (it is a switch's cost, not the draft length's)."""
    verify_ms: float
    host_ms: float
    """Everything else since the last round: judging, commit, events."""
    verify_rows: int | None = None
    """The rows the verify pass scored (a tree's nodes + 1); None: a chain's, its drafts + 1."""


class DraftLengthPolicy(Protocol):
    def propose(self) -> int:
        """The most tokens to draft next round."""
        ...

    def keep_drafting(self, confidences: Sequence[float]) -> bool:
        """Called after each drafted token when `stops_early`; False ends the draft."""
        ...

    def update(self, num_drafted: int, num_accepted: int, times: RoundTimes | None = None) -> None:
        """Learn from the round the verifier just judged (`times`: what it cost, where known)."""
        ...

    @property
    def stops_early(self) -> bool: ...


def _clamp(k: int, params: PolicyParams) -> int:
    return max(params.k_min, min(params.k_max, k))


class Fixed:
    stops_early = False

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.k = k

    def propose(self) -> int:
        return self.k

    def keep_drafting(self, confidences: Sequence[float]) -> bool:
        return True

    def update(self, num_drafted: int, num_accepted: int, times: RoundTimes | None = None) -> None:
        pass


class AcceptanceRate(Fixed):
    """k +- 1 when the last round's accepted/proposed leaves [low, high]; boundaries keep k."""

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.params = params
        self.k = _clamp(k, params)

    def update(self, num_drafted: int, num_accepted: int, times: RoundTimes | None = None) -> None:
        if num_drafted == 0:
            return
        rate = num_accepted / num_drafted
        if rate < self.params.low_acceptance:
            self.k = _clamp(self.k - 1, self.params)
        elif rate > self.params.high_acceptance:
            self.k = _clamp(self.k + 1, self.params)


class AcceptedLength(Fixed):
    """EMA s <- a * accepted + (1 - a) * s from s0 = k - 1; k = clamp(round(s) + 1).

    The + 1 probes one token past the recently accepted prefix. Rounding is half away from zero.
    """

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.params = params
        self.ema = float(k - 1)
        self.k = _clamp(k, params)

    def update(self, num_drafted: int, num_accepted: int, times: RoundTimes | None = None) -> None:
        if num_drafted == 0:
            return
        alpha = self.params.ema_alpha
        self.ema = alpha * num_accepted + (1 - alpha) * self.ema
        self.k = _clamp(math.floor(self.ema + 0.5) + 1, self.params)


class Confidence(Fixed):
    """Draft up to k, at least k_min, and stop once the estimated chance that some drafted token
    is rejected, 1 - prod(c_j), exceeds the threshold. c_j is the drafter's probability of its
    own token: a stand-in for SpecDec++'s trained acceptance head."""

    stops_early = True

    def __init__(self, k: int, params: PolicyParams) -> None:
        self.params = params
        self.k = max(k, params.k_min)

    def keep_drafting(self, confidences: Sequence[float]) -> bool:
        if len(confidences) < self.params.k_min:
            return True
        return 1.0 - math.prod(confidences) <= self.params.confidence_threshold


def best_k(
    kept_share: Sequence[float],
    drafted_share: Sequence[float],
    verify_ms: Mapping[int, float],
    *,
    draft_step_ms: float,
    draft_call_ms: float,
    host_ms: float,
    k_max: int,
) -> int:
    """The k in 0..k_max with the most tokens per ms: for k >= 1, `speedup.predict_by_k`'s
    expected tokens over its round time (draft call, k drafter steps, the verify pass over
    k + 1 rows, host work; `kept_share` and `drafted_share` as there); for k = 0, one token
    over a round that drafts nothing (verify over one row, host work, no draft call). The
    smaller k on a tie: less to throw away."""
    best, best_rate = 0, 1.0 / (verify_ms[1] + host_ms) if verify_ms[1] + host_ms > 0 else math.inf
    predictions = predict_by_k(
        kept_share,
        verify_ms,
        draft_step_ms,
        target_step_ms=1.0,  # any yardstick: only the ratio of tokens to time is compared
        k_max=k_max,
        host_ms=host_ms,
        drafted_share=drafted_share,
        draft_call_ms=draft_call_ms,
    )
    for p in predictions:
        rate = p.expected_tokens / p.round_ms if p.round_ms > 0 else math.inf
        if rate > best_rate:
            best, best_rate = p.k, rate
    return best


class _Line:
    """A least-squares line through discounted (x, y) points, kept as weighted sums."""

    def __init__(self) -> None:
        self.sums = [0.0] * 5  # weight, w x, w y, w x², w x y

    def add(self, x: float, y: float, weight: float = 1.0) -> None:
        for i, value in enumerate((1.0, x, y, x * x, x * y)):
            self.sums[i] += weight * value

    def discount(self, factor: float) -> None:
        if self.sums[0] > 1e-9:  # a uniform discount moves no line: only keep the numbers finite
            self.sums = [value * factor for value in self.sums]

    def fit(self) -> tuple[float, float] | None:
        """(intercept, slope); a flat line through the mean where every point has one x; None
        with no point."""
        weight, wx, wy, wxx, wxy = self.sums
        if weight <= 0:
            return None
        mean_x, mean_y = wx / weight, wy / weight
        spread = wxx - weight * mean_x * mean_x
        if spread <= 1e-9 * max(1.0, wxx):
            return mean_y, 0.0
        slope = (wxy - weight * mean_x * mean_y) / spread
        return mean_y - slope * mean_x, slope


class CostAware(Fixed):
    """Each round, the k (0 allowed: no speculation) that maximises the predicted tokens per
    second (`best_k`) from what this run's own rounds measured, every record discounted by
    DISCOUNT per round so it follows the text and the machine:

    - the verify pass by rows: a line through the mean time at each row count seen, where none
      was seen (a forward pass over more rows costs more, so the line is made non-decreasing);
    - the drafter's time: a line in the tokens drafted, a fixed part per call plus a step;
    - the host's work per round; of the rounds that asked for at least i tokens, the share
      that drafted i (prompt lookup drafts only what it finds); and acceptance as a chance per
      position, of keeping token i once every token before it was kept. Each chance counts
      PRIOR_ROUNDS rounds more, at the chance of the position before (the first: at
      PRIOR_ACCEPTANCE): a position seldom drafted (the policy asks for less) is judged like its
      neighbour rather than unknown, and as the policy drafts nothing the evidence fades to the
      prior, so a drafter written off early (prompt lookup before the text repeats) is tried again.

    It drafts k, then k_max, first: two points of each line, from which k = 0 and 1 are
    predicted too; then, while it drafts, every PROBE_EVERY rounds the k on either side of its
    choice, in turn, so a k it does not use stays measured.

    With draft trees (`width`, `tree_nodes`) k is the tree's depth: acceptance and drafting are
    counted by depth (a tree grows a level a pass), and a round of depth k is charged the verify
    pass over its tree's rows (`tree.verify_rows`), not k + 1."""

    DISCOUNT = 0.95
    PROBE_EVERY = 4
    PRIOR_ROUNDS = 1.0
    PRIOR_ACCEPTANCE = 0.6

    def __init__(self, k: int, params: PolicyParams, *, width: int = 1, tree_nodes: int = 0) -> None:
        self.params = params
        self.width, self.tree_nodes = width, tree_nodes
        self.k = min(k, params.k_max)
        self.probes = list(dict.fromkeys([self.k, params.k_max]))
        self.rounds = 0
        self.asked: list[float] = []
        self.drafted: list[float] = []
        self.reached: list[float] = []
        """Rounds that drafted token i with every token before it kept."""
        self.kept: list[float] = []
        self.verify: dict[int, list[float]] = {}
        """rows -> [discounted weight, discounted sum of ms]."""
        self.draft = _Line()
        """Drafting ms against tokens drafted, over the rounds that drafted."""
        self.host = [0.0, 0.0]

    def propose(self) -> int:
        return self.k

    def update(self, num_drafted: int, num_accepted: int, times: RoundTimes | None = None) -> None:
        if times is None:
            return
        asked = self.k
        self._age()
        reached = min(num_drafted, num_accepted + 1)
        counted = (self.asked, asked), (self.drafted, num_drafted), (self.reached, reached), (self.kept, num_accepted)
        for counts, n in counted:
            while len(counts) < n:
                counts.append(0.0)
            for i in range(n):
                counts[i] += 1.0
        rows = times.verify_rows if times.verify_rows is not None else num_drafted + 1
        entry = self.verify.setdefault(rows, [0.0, 0.0])
        entry[0] += 1.0
        entry[1] += times.verify_ms
        if num_drafted:
            self.draft.add(num_drafted, times.draft_ms)
        self.host[0] += 1.0
        self.host[1] += times.host_ms
        self.rounds += 1
        self.k = self._next()

    def _age(self) -> None:
        for counts in (self.asked, self.drafted, self.reached, self.kept):
            counts[:] = [c * self.DISCOUNT for c in counts]
        # Times are kept finite: a uniform discount moves no mean, and only their mix matters.
        if sum(weight for weight, _ in self.verify.values()) > 1e-9:
            for entry in self.verify.values():
                entry[0] *= self.DISCOUNT
                entry[1] *= self.DISCOUNT
        self.draft.discount(self.DISCOUNT)
        if self.host[0] > 1e-9:
            self.host = [self.host[0] * self.DISCOUNT, self.host[1] * self.DISCOUNT]

    def _next(self) -> int:
        if self.probes:
            self.probes.pop(0)
        if self.probes:
            return self.probes[0]
        best = self.best()
        # Keep the neighbours measured, one side then the other; not while drafting nothing, where
        # a probe would pay the drafter's catch-up, and the prior brings drafting back.
        if best and self.rounds % self.PROBE_EVERY == 0:
            side = 1 if (self.rounds // self.PROBE_EVERY) % 2 else -1
            return min(self.params.k_max, best + side)
        return best

    def best(self) -> int:
        """The k the records now favour (`best_k`)."""
        k_max = self.params.k_max
        means = {rows: total / weight for rows, (weight, total) in self.verify.items() if weight > 0}
        rows_line = _Line()
        for rows, ms in means.items():  # each row count alike, however often it ran
            rows_line.add(rows, ms)
        intercept, slope = rows_line.fit() or (0.0, 0.0)

        def verify_at(rows: int) -> float:  # measured where measured, the line elsewhere
            return means[rows] if rows in means else intercept + max(slope, 0.0) * rows

        # best_k reads a round of k drafts at k + 1 rows: there, the pass this round shape makes
        verify_ms = {k + 1: verify_at(verify_rows(self.width, self.tree_nodes, k)) for k in range(k_max + 1)}
        call_ms, step_ms = self.draft.fit() or (0.0, 0.0)
        call_ms, step_ms = max(call_ms, 0.0), max(step_ms, 0.0)
        host_ms = self.host[1] / self.host[0] if self.host[0] else 0.0
        kept_share, drafted_share = self.shares(k_max)
        costs = {"draft_step_ms": step_ms, "draft_call_ms": call_ms, "host_ms": host_ms}
        return best_k(kept_share, drafted_share, verify_ms, **costs, k_max=k_max)

    def shares(self, k_max: int) -> tuple[list[float], list[float]]:
        """(kept, drafted) shares at positions 1..k_max of the rounds that asked for that many:
        `predict_by_k`'s `acceptance_per_position` and `drafted_share` (class docstring)."""
        prior = self.PRIOR_ROUNDS
        kept_share, drafted_share = [], []
        chance, all_kept = self.PRIOR_ACCEPTANCE, 1.0
        for i in range(k_max):
            asked, drafted = _at(self.asked, i), _at(self.drafted, i)
            chance = (_at(self.kept, i) + prior * chance) / (_at(self.reached, i) + prior)
            all_kept *= chance
            # Drawn toward drafting all it is asked by one round (a model drafter does); a drafter
            # asked and found short (prompt lookup) falls below it as its rounds count.
            share = (drafted + prior) / (asked + prior) if asked else 1.0
            drafted_share.append(share)
            kept_share.append(share * all_kept)
        return kept_share, drafted_share


def _at(counts: Sequence[float], i: int) -> float:
    return counts[i] if i < len(counts) else 0.0


def make_policy(
    name: PolicyName, k: int, params: PolicyParams, *, width: int = 1, tree_nodes: int = 0
) -> DraftLengthPolicy:
    """The policy `name` starting at k. `width` and `tree_nodes`: the rounds' tree settings, which
    set the rows a round verifies; of the policies, only `cost` weighs rows."""
    policies: dict[str, Callable[[], DraftLengthPolicy]] = {
        "fixed": lambda: Fixed(k, params),
        "acceptance-rate": lambda: AcceptanceRate(k, params),
        "accepted-length": lambda: AcceptedLength(k, params),
        "confidence": lambda: Confidence(k, params),
        "cost": lambda: CostAware(k, params, width=width, tree_nodes=tree_nodes),
    }
    return policies[name]()


def settings_policy(settings: SpecSettings) -> DraftLengthPolicy:
    """The policy the settings name, at their k and tree settings."""
    return make_policy(
        settings.policy, settings.k, settings.policy_params, width=settings.width, tree_nodes=settings.tree_nodes
    )
