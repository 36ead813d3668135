"""Per-round routing (`--route adaptive`): the drafter for each round, from what the run measured.

A drafter's worth is the rate it gives: committed tokens per round over the round's time,

    rate_i = tokens_i / round_ms_i

both discounted means over the rounds drafter i drafted (tokens: accepted + 1; time: drafting,
verifying and host work, a catch-up left out). Discounting (weight `discount` per round since)
lets the estimates follow a text that changes register: code, then prose, then a quoted passage.

In a plain run only the routed drafter is judged, which makes the choice a bandit. It is
discounted UCB (Garivier and Moulines, 2011): tokens_i gets an optimism bonus that shrinks as
drafter i is observed and grows back as those observations age, so a drafter that lost is tried
again, rarely, in case the text moved on. The bonus never lifts tokens_i past k + 1, the most a
round can commit: a drafter whose round costs more than k + 1 tokens' worth at the best rate
(SmolLM2's early exit, six target steps a round) can never pay, so it is never tried again.

A register change shows sooner as a drop: when the routed drafter's last `window` rounds commit far
fewer tokens than its record (monitored UCB, Cao et al. 2019), every record from before the drop is
aged, so its recent rounds weigh most in its record and the others, their bonuses grown, are tried
again soon. A change shows as a rise too: when a drafter judged without serving (a free proposal)
keeps far more in its last `window` judgements than its record says, its record from before them is
aged, so it is chosen as soon as it would pay rather than once its old record fades. With
counterfactual routes on, every drafter is judged every round (full information): the bonus is
dropped and the best recent rate wins.

Prompt lookup proposes for free (a few dictionary reads): in a greedy, lossless run its proposal
in every round another drafter served is judged against the committed tokens, which are the
target's own greedy tokens, once they reach the proposal's end (`kept_of_proposal`; a round that
commits fewer tokens than it proposed cannot tell yet). An untimed observation: its tokens count,
its time is what its own rounds took.

A drafter's round time is a property of the drafter and the machine, not of the text: it is
discounted over that drafter's own timed rounds, so it holds while the drafter sits out.

A free drafter's proposal length is known before the round: one that has nothing to propose this
round is passed over, and a round that drafted nothing is left out of every record.

Untried drafters: a free one serves a round as soon as it proposes (it costs a verify pass of its
proposal), and so does a model drafter while no model drafter's round has been timed. Once one
has, an untried model drafter is priced at the pooled model drafters' round time and credited the
most a round can commit, k + 1 tokens: it serves once that could beat the best on record, never
while a drafter already does as well as it possibly could (prompt lookup copying four tokens a
round for a third of a model's round time). Trying every drafter once regardless spent a model
round, about 5% of a 128-token run that prompt lookup copies in 28 rounds.

A model drafter that sat out some rounds must catch its cache up on the tokens committed
meanwhile before it drafts. That cost (per lagging token, learned from the catch-ups seen) is
charged to a switch, spread over `switch_rounds`, the rounds a switch is expected to serve.

A round's time is noisy (a first use compiles kernels; another process takes the CPU), and one
outlier would price a drafter out for a long while: each observed time is clipped at OUTLIER times
the pooled mean round time of the model drafters, and a drafter's estimate is drawn toward that
pooled mean by one pseudo-round. The pool leaves free drafters' rounds out: theirs are little more
than a verify pass, no prior for a round that drafts through a model (pooled in, prompt lookup's
rounds drew the early exit's 500 ms toward 340, and it was tried again twice a run). A free
drafter's own estimate is drawn only down toward the pool: pulled up, prompt lookup having served
once would look as dear as the model drafters for many rounds.

`none` (no speculation) is one more choice, for text where every drafter loses: its round drafts
nothing and commits exactly one token, so its tokens need no estimate and no optimism. Its time,
a target step, is its own mean once it has served (no pull toward drafting rounds, which cost
more). It need not serve a round to be priced: a target step is one row through the target, and
no pass of one row costs more than the verify pass of k + 1 rows that every drafting round makes,
so until it serves, `none` is priced at the drafting rounds' verify and host time, a bound from
above. Where even that bound puts it within TIME_NONE of the best drafter's rate, it serves one
round to be timed (a target step may cost well under a verify pass); where a drafter clearly wins,
no round is spent learning that a target step is slower.

Where the request router sends the prompt to `none` (`hold_back`: the route map says every drafter
loses on such text, from measurements or recorded sessions), a model drafter that has not served
is left out: serving it once to time it (its first round also takes in the whole prompt) and then
again whenever discounting has aged its record costs more than a run can win back. A drafter that
proposes for free is judged on its proposals, and first serves once they keep at least one token
a round (HELD_FREE_TOKENS committed): below that its extra verify rows cannot pay. Under `none` a
proposal of k tokens is judged only k rounds after it was made (one token commits a round), too
late for a passage the answer starts to copy: a free drafter whose waiting proposal every token
committed since has matched (`matching`) serves at once, its next proposal most likely the same
passage's continuation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specplay.engine.settings import NONE_ROUTE

OUTLIER = 3.0
"""Observed round times are clipped at this many times the model drafters' pooled mean."""
AGED = 0.2
"""After a drop, what the evidence from before it weighs."""
HELD_FREE_TOKENS = 2.0
"""Under `hold_back`, the tokens a round a free drafter's judged proposals must commit before it serves."""
TIME_NONE = 0.5
"""Untimed `none` serves a round once its rate at the bound is this share of the best drafter's."""


@dataclass(frozen=True, slots=True)
class RoundObservation:
    """What one drafter did in one round, as the router learns it."""

    drafter: str
    tokens: int
    """Tokens the round committed with this drafter's proposal: its accepted length + 1."""
    round_ms: float | None
    """Drafting, verifying and host work; a catch-up is not in it (it is charged apart). None: the
    drafter was judged without drafting (a free proposal: `Generation.proposal`), so not timed."""
    verify_ms: float | None = None
    """The verifying and host part of `round_ms`: what `none` costs at most (module docstring)."""


def kept_of_proposal(proposed: Sequence[int], committed: Sequence[int]) -> int | None:
    """How many of a free proposal's tokens a greedy target keeps, judged against the tokens
    committed since it was made (the target's own greedy tokens): those before the first that
    differs. None while the committed tokens match it but have not reached its end."""
    for kept, (drafted, target) in enumerate(zip(proposed, committed, strict=False)):
        if drafted != target:
            return kept
    return len(proposed) if len(committed) >= len(proposed) else None


@dataclass(slots=True)
class _Estimate:
    """Discounted sums over one drafter's observed rounds: tokens by the round, times by the
    drafter's own timed rounds."""

    weight: float = 0.0
    tokens: float = 0.0
    timed: float = 0.0
    """The weight of the observations that were timed (round_ms's)."""
    round_ms: float = 0.0
    seen: bool = False


class RoundRouter:
    """Chooses each round's drafter; `observe` after every round, whatever chose its drafter."""

    def __init__(
        self,
        drafters: Sequence[str],
        discount: float = 0.95,
        exploration: float = 0.1,
        switch_rounds: float = 4.0,
        window: int = 3,
        drop_tokens: float = 1.5,
        hold_back: bool = False,
    ) -> None:
        """`drafters` in the order untried ones are tried (the request router's choice first)."""
        self.drafters = tuple(drafters)
        self.discount = discount
        self.exploration = exploration
        """The bonus's scale, in rounds' worth of tokens (k + 1): larger explores more."""
        self.switch_rounds = switch_rounds
        self.window = window
        self.drop_tokens = drop_tokens
        """A drop: the window's mean tokens at most half the record's, and this many below it."""
        self.recent: list[RoundObservation] = []
        """The routed drafter's rounds since it was last switched to (the last `window`)."""
        self.judged: dict[str, list[int]] = {}
        """Tokens of the last `window` judgements of each drafter that did not serve them."""
        self.changes = 0
        """Drops seen: how often the text looked as if it had changed."""
        self.estimates = {name: _Estimate() for name in self.drafters}
        self.catch_up_tokens = dict.fromkeys(self.drafters, 0)
        self.catch_up_ms = dict.fromkeys(self.drafters, 0.0)
        self.hold_back = hold_back
        """A model drafter that has not served is left out (module docstring)."""
        self.full_information = False
        """The last round judged every drafter (counterfactual routes): no bonus is needed."""
        self.pooled = _Estimate()
        """Every model drafter's rounds together (free drafters' and `none`'s left out): the prior
        of each one's round time (module docstring)."""
        self.free: set[str] = set()
        """The drafters that propose for free (prompt lookup), as `choose` learns them."""
        self.pooled_verify = _Estimate()
        """Every drafting round's verify and host time: `none`'s price until it serves."""
        self.matching: frozenset[str] = frozenset()
        """Free drafters with a proposal waiting to be judged that every token committed since
        has matched, at least one (module docstring: under `hold_back`)."""

    def observe(
        self,
        routed: RoundObservation | None,
        others: Sequence[RoundObservation] = (),
        matching: Iterable[str] = (),
    ) -> None:
        """One round: the routed drafter's observation (None: it drafted nothing, so the round says
        nothing of it), the counterfactual or free ones if any, and the free drafters whose
        waiting proposals match the tokens committed so far (`matching`)."""
        self.matching = frozenset(matching)
        observations = [*([routed] if routed else []), *others]
        limit = OUTLIER * self.pooled.round_ms / self.pooled.timed if self.pooled.timed else math.inf
        for estimate in self.estimates.values():  # tokens age by the round; times by their own
            estimate.weight *= self.discount
            estimate.tokens *= self.discount
        for seen in observations:
            estimate = self.estimates.get(seen.drafter)
            if estimate is None:  # a drafter this router was not built with
                continue
            estimate.weight += 1.0
            estimate.tokens += seen.tokens
            estimate.seen = True
            if seen.verify_ms is not None and seen.drafter != NONE_ROUTE:
                self.pooled_verify.timed = self.pooled_verify.timed * self.discount + 1.0
                self.pooled_verify.round_ms = self.pooled_verify.round_ms * self.discount + seen.verify_ms
            if seen.round_ms is not None:
                # `none`'s target steps and a free drafter's verify passes are no prior for drafting rounds.
                pooled = seen.drafter != NONE_ROUTE and seen.drafter not in self.free
                for into in (estimate, self.pooled) if pooled else (estimate,):
                    into.timed = into.timed * self.discount + 1.0
                    into.round_ms = into.round_ms * self.discount + min(seen.round_ms, limit)
        # `none` needs no judging: its one token a round is certain.
        self.full_information = {seen.drafter for seen in observations} >= set(self.drafters) - {NONE_ROUTE}
        if not self.full_information:
            self._watch_judged(others)
        if routed is None:
            return
        if self.recent and self.recent[-1].drafter != routed.drafter:
            self.recent = []
        self.recent = [*self.recent, routed][-self.window :]
        if not self.full_information and self._dropped(routed.drafter):
            self._restart(routed.drafter)

    def _dropped(self, drafter: str) -> bool:
        """The routed drafter's last `window` rounds fell well below its record."""
        estimate = self.estimates.get(drafter)
        if estimate is None or len(self.recent) < self.window:
            return False
        record = estimate.tokens / estimate.weight
        recent = sum(seen.tokens for seen in self.recent) / len(self.recent)
        return recent <= record / 2 and record - recent >= self.drop_tokens

    def _watch_judged(self, others: Sequence[RoundObservation]) -> None:
        """A drafter judged off duty whose last `window` judgements keep far more than its record
        (the drop's test, mirrored): its record from before them is aged (module docstring)."""
        for seen in others:
            if seen.drafter not in self.estimates or seen.drafter == NONE_ROUTE:
                continue
            window = [*self.judged.get(seen.drafter, []), seen.tokens][-self.window :]
            self.judged[seen.drafter] = window
            estimate = self.estimates[seen.drafter]
            record, recent = estimate.tokens / estimate.weight, sum(window) / len(window)
            if len(window) == self.window and recent >= 2 * record and recent - record >= self.drop_tokens:
                self.changes += 1
                rounds = float(len(window))
                estimate.weight = max(estimate.weight - rounds, 0.0) * AGED + rounds
                estimate.tokens = max(estimate.tokens - sum(window), 0.0) * AGED + sum(window)
                self.judged[seen.drafter] = []

    def _restart(self, drafter: str) -> None:
        """The text changed: every record of tokens from before the drop weighs a fifth as much
        (means kept, bonuses larger), `drafter`'s recent rounds in full, so its record leans on
        them. Round times stay: the text does not change what a drafter's round costs."""
        self.changes += 1
        rounds, tokens = float(len(self.recent)), sum(s.tokens for s in self.recent)
        for name, estimate in self.estimates.items():
            if name == drafter:  # the window's rounds are in its record: only the rest is aged
                estimate.weight = max(estimate.weight - rounds, 0.0) * AGED + rounds
                estimate.tokens = max(estimate.tokens - tokens, 0.0) * AGED + tokens
            else:
                estimate.weight *= AGED
                estimate.tokens *= AGED
        self.recent = []

    def observe_catch_up(self, drafter: str, tokens: int, ms: float) -> None:
        if drafter in self.catch_up_tokens and tokens > 0:
            self.catch_up_tokens[drafter] += tokens
            self.catch_up_ms[drafter] += ms

    def catch_up_ms_per_token(self, drafter: str) -> float:
        """0 until a catch-up was seen: optimism, which the first switch corrects."""
        tokens = self.catch_up_tokens[drafter]
        return self.catch_up_ms[drafter] / tokens if tokens else 0.0

    def round_ms(self, drafter: str) -> float:
        """A round's expected time with `drafter` (module docstring: clipped, drawn toward the
        pool, a free drafter's only down; `none`'s, a target step, its own mean)."""
        estimate, pooled = self.estimates[drafter], self.pooled
        if drafter == NONE_ROUTE and estimate.timed:
            return estimate.round_ms / estimate.timed
        if drafter == NONE_ROUTE and self.pooled_verify.timed:
            return self.pooled_verify.round_ms / self.pooled_verify.timed
        if not pooled.timed:  # no model drafter timed yet: nothing to draw toward
            return estimate.round_ms / estimate.timed if estimate.timed else 0.0
        prior = pooled.round_ms / pooled.timed
        pulled = (estimate.round_ms + prior) / (estimate.timed + 1.0)
        if drafter in self.free and estimate.timed:
            return min(estimate.round_ms / estimate.timed, pulled)
        return pulled

    def _tokens(self, drafter: str) -> float:
        """Tokens per round on record (`none`'s is certain: a round that drafts nothing commits one)."""
        estimate = self.estimates[drafter]
        return 1.0 if drafter == NONE_ROUTE else estimate.tokens / estimate.weight

    def rate(self, drafter: str) -> float | None:
        """Estimated tokens per ms, without the bonus (None: not observed yet)."""
        estimate = self.estimates[drafter]
        round_ms = self.round_ms(drafter)
        if not estimate.seen or round_ms <= 0:
            return None
        return estimate.tokens / estimate.weight / round_ms

    def _held_back(self, name: str) -> bool:
        """Under `hold_back`, a drafter not yet served that has not shown it may pay (module docstring)."""
        estimate = self.estimates[name]
        if not self.hold_back or name == NONE_ROUTE or estimate.timed:
            return False
        if name not in self.free:
            return True
        return name not in self.matching and (not estimate.weight or self._tokens(name) < HELD_FREE_TOKENS)

    def _worth_timing_none(self, candidates: Sequence[str]) -> bool:
        """Whether `none`, priced at its bound, comes within TIME_NONE of the best drafter's rate."""
        rates = [rate for name in candidates if name != NONE_ROUTE and (rate := self.rate(name)) is not None]
        bound_ms = self.round_ms(NONE_ROUTE)
        return bool(rates) and bound_ms > 0 and 1.0 / bound_ms >= TIME_NONE * max(rates)

    def choose(self, k: int, current: str, lags: Mapping[str, int], proposing: Mapping[str, int] | None = None) -> str:
        """The drafter for the next round of up to k drafted tokens; `current` drafted the last
        one, `lags` says how many committed tokens each drafter's cache lacks and `proposing` how
        many tokens each free drafter proposes this round: one with nothing to propose is passed
        over (a round with it would be a target step)."""
        self.free.update(proposing or {})
        candidates = [name for name in self.drafters if (proposing or {}).get(name) != 0 and not self._held_back(name)]
        if not candidates:
            return current
        for name in candidates:
            if not self.estimates[name].timed and name != NONE_ROUTE and (name in self.free or not self.pooled.timed):
                return name  # served once to be timed (module docstring: untried drafters)
        if NONE_ROUTE in candidates and not self.estimates[NONE_ROUTE].timed and self._worth_timing_none(candidates):
            return NONE_ROUTE
        total = sum(e.weight for e in self.estimates.values())
        best, best_index = candidates[0], -math.inf
        for name in candidates:
            estimate = self.estimates[name]
            untried = not estimate.timed and name != NONE_ROUTE  # a model drafter: at the pool's time
            tokens = float(k + 1) if untried else self._tokens(name)
            if not untried and name != NONE_ROUTE and not self.full_information and total > 1:
                bonus = self.exploration * (k + 1) * math.sqrt(math.log(total) / estimate.weight)
                tokens += min(bonus, max(k + 1 - tokens, 0.0))  # no round commits more than k + 1
            round_ms = self.round_ms(name)
            if name != current:
                round_ms += lags.get(name, 0) * self.catch_up_ms_per_token(name) / self.switch_rounds
            index = tokens / round_ms if round_ms > 0 else math.inf
            # Ties keep the current drafter: a switch is never free.
            if index > best_index or (index == best_index and name == current):
                best, best_index = name, index
        return best
