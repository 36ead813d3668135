"""The run's books on its drafters, for per-round routing (rounds.py): which drafter's cache is
current, the free proposals waiting to be judged, and what each round tells the round router.

The run owns one of these beside its round router; a round never sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specplay.engine.backend_protocol import Generation
from specplay.engine.events import RoundEvent
from specplay.engine.routers.rounds import RoundObservation, RoundRouter, kept_of_proposal
from specplay.engine.settings import NONE_ROUTE


class DrafterBooks:
    def __init__(self, router: RoundRouter, drafters: Sequence[str], first: str, prompt_tokens: int) -> None:
        self.router = router
        self.drafters = tuple(drafters)
        self.synced: dict[str, int] = {first: prompt_tokens}
        """Committed tokens when each drafter last drafted: what it lacks since is its catch-up."""
        self.proposals: list[tuple[str, int, list[int]]] = []
        """Free proposals not judged yet: (drafter, output tokens when it was made, its tokens)."""

    def choose(self, generation: Generation, k: int, current: str, generated: int, hold_free: bool) -> str:
        """Under `adaptive`: this round's drafter, from the round router, its free proposals seen
        first; `hold_free`: keep the others' proposals to judge once the output reaches their end."""
        lags = {name: len(generation.tokens) - self.synced.get(name, 0) for name in self.drafters}
        free = {n: proposed for n in self.drafters if (proposed := generation.proposal(n, k)) is not None}
        chosen = self.router.choose(k, current, lags, {name: len(proposed) for name, proposed in free.items()})
        if hold_free:
            self._hold(free, chosen, generated)
        return chosen

    def catch_up(self, generation: Generation, drafter: str, k: int) -> int:
        """Step 0 of a round: `drafter`'s cache brought to the committed tokens; returns the tokens
        it took in (0 where nothing drafts, or the drafter drafted the round before)."""
        if drafter == NONE_ROUTE or k == 0 or self.synced.get(drafter) == len(generation.tokens):
            return 0
        return generation.catch_up(drafter)

    def _hold(self, free: Mapping[str, list[int]], chosen: str, generated: int) -> None:
        """In a greedy, lossless run the free proposals of the drafters not routed, judged once the
        committed tokens (the target's own greedy ones) reach their end, tell the round router how
        those drafters would have done, for free."""
        for name, proposed in free.items():
            if name != chosen and proposed:  # nothing proposed: no round with it to judge
                self.proposals.append((name, generated, proposed))

    def _judged(self, output: Sequence[int]) -> tuple[list[RoundObservation], set[str]]:
        """The free proposals the committed tokens now judge (untimed), and the drafters of those
        that wait with every token committed since they were made matched, one at least."""
        judged, waiting, matching = [], [], set()
        for name, at, proposed in self.proposals:
            kept = kept_of_proposal(proposed, output[at:])
            if kept is None:
                waiting.append((name, at, proposed))
                if len(output) > at:
                    matching.add(name)
            else:
                judged.append(RoundObservation(name, kept + 1, None))
        self.proposals = waiting
        return judged, matching

    def learn(self, event: RoundEvent, committed: int, output: Sequence[int], asked: int) -> None:
        """Tell the round router what each drafter did this round; note who is now current (not a
        drafter asked for nothing: it never saw the round's context). `committed`: the prompt and
        committed tokens; `output`: the generated ones."""
        round_ms = event.draft_ms - event.catch_up_ms + event.verify_ms + event.overhead_ms
        others, matching = self._judged(output)
        for other in event.counterfactuals:  # its own draft and verify, and the round's host work
            others.append(RoundObservation(other.drafter, other.num_accepted + 1, other.elapsed_ms + event.overhead_ms))
            self.synced[other.drafter] = committed
        # A round that drafted nothing (prompt lookup found nothing to copy) was a target step: it
        # says nothing of its drafter, and under `adaptive` it is known before the round. Under
        # `none` that target step is the choice itself, and what it costs is what `none` is worth.
        judged = event.nodes or event.drafter == NONE_ROUTE
        verify_ms = event.verify_ms + event.overhead_ms
        routed = RoundObservation(event.drafter, event.num_accepted + 1, round_ms, verify_ms) if judged else None
        self.router.observe(routed, others, matching)
        self.router.observe_catch_up(event.drafter, event.catch_up_tokens, event.catch_up_ms)
        if asked:
            self.synced[event.drafter] = committed
