"""Run metrics, named as vLLM names its speculative-decoding metrics."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from specplay.engine.correction_rank import empty_histogram, rank_key, second_branch_share
from specplay.engine.disturbance import TIMING_DRIFT, grouped_drift
from specplay.engine.events import RoundEvent, StepEvent, TokenSource
from specplay.engine.layout import is_chain
from specplay.engine.speedup import draft_acceptance_rate, mean_acceptance_length, mean_step_ms


@dataclass
class TimedRounds:
    """Rounds inside the span tokens/s counts and their times: what a measured speedup is made of
    (`speedup.round_account`)."""

    rounds: int = 0
    tokens: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    overhead_ms: float = 0.0

    def add(self, event: RoundEvent) -> None:
        self.rounds += 1
        self.tokens += len(event.tokens)
        self.draft_ms += event.draft_ms
        self.verify_ms += event.verify_ms
        self.overhead_ms += event.overhead_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Metrics:
    """Accumulates one lane's counters as rounds and steps arrive."""

    def __init__(self, speculative: bool) -> None:
        self.speculative = speculative
        self.num_spec_steps = 0
        self.num_draft_tokens = 0
        self.num_accepted_draft_tokens = 0
        self.num_judged_draft_tokens = 0
        """Drafted positions the verifier reached: a rejection ends the round."""
        self.drafted_per_position: list[int] = []
        self.accepted_per_position: list[int] = []
        self.tokens_by_source: Counter[TokenSource] = Counter()
        self.tv_spent = 0.0
        self.rejection_ranks = empty_histogram()
        self.num_tree_rounds = 0
        """Rounds whose draft branched (a node with siblings, engine/tree.py): no chain's α holds there."""
        """Rejections whose correction's rank is known, by rank (width.py)."""
        self.counterfactual_rounds: list[int] = []
        self.accepted_by_drafter: dict[str, list[int]] = {}
        """Counterfactual rounds only: each drafter's accepted length per round, the routed one's as committed."""
        self.routed_accepted: list[int] = []
        self.counterfactual_ms = 0.0
        self.rounds_by_route: dict[str, list[int]] = {}
        """Each drafter's rounds as [rounds, accepted tokens]: which served, and how well."""
        self.route_switches = 0
        self.last_route: str | None = None
        self.catch_up_ms = 0.0
        self.catch_up_tokens = 0
        self.draft_ms = self.verify_ms = self.overhead_ms = 0.0
        self.timed = TimedRounds()
        """The rounds tokens/s counts: after the first token's, up to the last token's."""
        self.num_steps = 0
        self.step_ms = 0.0
        """Target-only and draft-only lanes: their steps after the first token's and the time those
        took, the span tokens/s counts (the yardstick of c and of a round's cost)."""
        self.repeated_ms: dict[int, list[float]] = {}
        """The times of the lane's repeated work, by its size, in order: a target-only or draft-only
        lane's steps (size 1), a speculative lane's verify passes by rows (`timing_drift`)."""
        self.num_tokens = 0
        self.num_first_tokens = 0
        """Tokens delivered with the first (a speculative lane's first round commits several)."""
        self.start_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None

    def add_tokens(self, sources: list[TokenSource], now_s: float) -> None:
        if not sources:
            return
        if self.first_token_s is None:
            self.first_token_s = now_s
            self.num_first_tokens = len(sources)
        self.last_token_s = now_s
        self.num_tokens += len(sources)
        for source in sources:  # Counter.update would first ask whether `sources` is a Mapping
            self.tokens_by_source[source] += 1

    def add_round(self, event: RoundEvent) -> None:
        """Before `add_tokens` with the round's tokens: a round after the first token's is timed."""
        if self.num_tokens and event.tokens:
            self.timed.add(event)
            self.repeated_ms.setdefault(event.nodes + 1, []).append(event.verify_ms)
        self.num_spec_steps += 1
        self.num_tree_rounds += not is_chain(event.parents)
        self.num_draft_tokens += event.nodes
        self.num_accepted_draft_tokens += event.num_accepted
        for i, kept in enumerate(_per_position(event)):
            if i == len(self.drafted_per_position):
                self.drafted_per_position.append(0)
                self.accepted_per_position.append(0)
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += kept
        for position in event.positions:
            # Each judged position emitted a token distributed as the rule's pi, position.spent from
            # the target in TV; unreached positions emitted nothing.
            if position.outcome != "unreached":
                self.num_judged_draft_tokens += 1
                self.tv_spent += position.spent
            if position.correction_rank is not None:
                self.rejection_ranks[rank_key(position.correction_rank)] += 1
        if event.counterfactuals:
            self.add_counterfactuals(event)
        served = self.rounds_by_route.setdefault(event.drafter, [0, 0])
        served[0] += 1
        served[1] += event.num_accepted
        self.route_switches += self.last_route is not None and event.drafter != self.last_route
        self.last_route = event.drafter
        self.catch_up_ms += event.catch_up_ms
        self.catch_up_tokens += event.catch_up_tokens
        self.draft_ms += event.draft_ms
        self.verify_ms += event.verify_ms
        self.overhead_ms += event.overhead_ms

    def add_step(self, event: StepEvent) -> None:
        """Before `add_tokens` with the step's token, as `add_round`."""
        if self.num_tokens:
            self.num_steps += 1
            self.step_ms += event.step_ms
            self.repeated_ms.setdefault(1, []).append(event.step_ms)

    def add_counterfactuals(self, event: RoundEvent) -> None:
        self.counterfactual_rounds.append(event.index)
        self.routed_accepted.append(event.num_accepted)
        accepted = {event.drafter: event.num_accepted} | {c.drafter: c.num_accepted for c in event.counterfactuals}
        for name, length in accepted.items():
            # A drafter first seen now (a route change) has no length for the earlier rounds.
            self.accepted_by_drafter.setdefault(name, [])
            self.accepted_by_drafter[name].append(length)
        self.counterfactual_ms += sum(c.elapsed_ms for c in event.counterfactuals)

    def counterfactual(self) -> dict[str, Any]:
        """Each drafter's mean acceptance length over the counterfactual rounds, and the route
        regret: the best drafter's minus that of the drafters the route chose."""
        if not self.counterfactual_rounds:
            return {"counterfactual": None, "route_regret": None}
        by_drafter = {
            name: {
                "mean_acceptance_length": mean_acceptance_length(sum(lengths), len(lengths)),
                "accepted_length_per_round": lengths,
            }
            for name, lengths in self.accepted_by_drafter.items()
        }
        routed = mean_acceptance_length(sum(self.routed_accepted), len(self.routed_accepted))
        best = max(entry["mean_acceptance_length"] for entry in by_drafter.values())
        return {
            "counterfactual": by_drafter,
            "route_regret": best - routed,  # below 0 where switching routes beat every single drafter
            "counterfactual_rounds": list(self.counterfactual_rounds),
            "counterfactual_ms": self.counterfactual_ms,
        }

    @property
    def tokens_per_s(self) -> float | None:
        """The decode rate: tokens delivered after the first delivery over the time since it.
        A speculative lane's first round delivers several tokens at once, all in the time to the
        first token; counting all but one of them in the rate (as mlx-lm's generation_tps does)
        would credit speculation with tokens the span did not make, by (n - 1) / (n - first)."""
        if self.first_token_s is None or self.last_token_s is None:
            return None
        elapsed_s, decoded = self.last_token_s - self.first_token_s, self.num_tokens - self.num_first_tokens
        return decoded / elapsed_s if decoded and elapsed_s > 0 else None

    def timing_drift(self) -> float | None:
        """How far the machine's speed moved during the lane (engine/disturbance.py): the drift of
        its most repeated work, a target-only lane's steps or a speculative lane's verify passes
        of the row count most of its rounds verified (the same work each time). None: too few."""
        times = max(self.repeated_ms.values(), key=len, default=[])
        return grouped_drift(times)

    def acceptance_per_position(self) -> list[float]:
        """At each draft position, accepted / drafted over the rounds that drafted that far."""
        pairs = zip(self.accepted_per_position, self.drafted_per_position, strict=True)
        return [accepted / drafted for accepted, drafted in pairs]

    def to_dict(self) -> dict[str, Any]:
        speculative = self.speculative
        steps, drafted = self.num_spec_steps, self.num_draft_tokens
        ttft_ms = None
        if self.first_token_s is not None and self.start_s is not None:
            ttft_ms = 1000 * (self.first_token_s - self.start_s)
        return (
            {
                "num_tokens": self.num_tokens,
                "tokens_per_s": self.tokens_per_s,
                "time_to_first_token_ms": ttft_ms,
                "num_tokens_by_source": dict(self.tokens_by_source),
                "num_spec_steps": steps if speculative else None,
                "num_draft_tokens": drafted if speculative else None,
                "num_accepted_draft_tokens": self.num_accepted_draft_tokens if speculative else None,
                "num_judged_draft_tokens": self.num_judged_draft_tokens if speculative else None,
                "mean_acceptance_length": mean_acceptance_length(self.num_accepted_draft_tokens, steps)
                if speculative
                else None,
                "draft_acceptance_rate": draft_acceptance_rate(self.num_accepted_draft_tokens, drafted)
                if speculative
                else None,
                "acceptance_per_position": self.acceptance_per_position() if speculative else None,
                "num_drafted_per_position": list(self.drafted_per_position) if speculative else None,
                "num_accepted_per_position": list(self.accepted_per_position) if speculative else None,
                "tv_spent": self.tv_spent if speculative else None,
                "rejection_rank_histogram": dict(self.rejection_ranks) if speculative else None,
                "num_tree_rounds": self.num_tree_rounds if speculative else None,
                "second_branch_share": second_branch_share(self.rejection_ranks) if speculative else None,
                "draft_ms": self.draft_ms if speculative else None,
                "verify_ms": self.verify_ms if speculative else None,
                "overhead_ms": self.overhead_ms if speculative else None,
                "timed_rounds": self.timed.to_dict() if speculative else None,
                "mean_step_ms": None if speculative else mean_step_ms(self.step_ms, self.num_steps),
                TIMING_DRIFT: self.timing_drift(),
            }
            | self.routes()
            | self.counterfactual()
        )

    def routes(self) -> dict[str, Any]:
        """Which drafters served the rounds, how well, and what switching between them cost
        (its catch-ups, already inside draft_ms)."""
        if not self.speculative:
            return {"rounds_by_route": None, "route_switches": None, "catch_up_ms": None, "catch_up_tokens": None}
        by_route = {
            name: {"rounds": rounds, "mean_acceptance_length": mean_acceptance_length(accepted, rounds)}
            for name, (rounds, accepted) in self.rounds_by_route.items()
        }
        return {
            "rounds_by_route": by_route,
            "route_switches": self.route_switches,
            "catch_up_ms": self.catch_up_ms,
            "catch_up_tokens": self.catch_up_tokens,
        }


def _per_position(event: RoundEvent) -> list[bool]:
    """Whether the round's kept path reached each depth of its draft (a chain's positions)."""
    return [event.num_accepted >= depth for depth in range(1, event.depth + 1)]
