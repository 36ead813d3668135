"""The generation loop: speculative, target-only and draft-only over one Backend.

The speculative round is `_Run._round` (its algorithm in the comment above it);
`reference_round.py` is the same round in plain numpy, which the tests hold the engine to.

The engine owns the one seeded random source and every decision, and reports through events.
It knows nothing of a UI, HTTP, files or any model library; its clock is injected.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from specplay.engine.accept import Verdict, judge
from specplay.engine.backend_protocol import Backend, Generation, VerifiedDraft, VerifiedTree
from specplay.engine.capabilities import check_supported
from specplay.engine.controls import LiveControls, settings_diff
from specplay.engine.draws import Draws, RoundDraws
from specplay.engine.events import (
    ControlEvent,
    Counterfactual,
    DoneEvent,
    DraftPosition,
    Event,
    FinishReason,
    Outcome,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
    TokenSource,
)
from specplay.engine.metrics import Metrics
from specplay.engine.policies import DraftLengthPolicy, RoundTimes, make_policy
from specplay.engine.request import Request
from specplay.engine.routers.request import (
    CodeProseRouter,
    Fallback,
    RouteChoice,
    Router,
    resolve_route,
    route_choice,
    route_map_for,
)
from specplay.engine.routers.rounds import RoundObservation, RoundRouter, kept_of_proposal
from specplay.engine.settings import ADAPTIVE_ROUTE, NONE_ROUTE, SpecSettings
from specplay.engine.stream import Clock
from specplay.engine.tree import depths, judge_tree, tree_shape
from specplay.errors import ConfigError, ModelError

_POLICY_FIELDS = {
    "k",
    "policy",
    "k_min",
    "k_max",
    "low_acceptance",
    "high_acceptance",
    "ema_alpha",
    "confidence_threshold",
    "width",  # a tree verifies more rows than its depth: `cost` learns the new shape afresh
    "tree_nodes",
}
_STREAM_FIELDS = {"route", "temperature", "top_p", "top_k", "min_p"}
TOP_N = 5
"""Candidates per distribution an inspecting request reports."""


class SpecEngine:
    """The event stream of speculative decoding (and target-only, draft-only) over a backend."""

    def __init__(
        self,
        backend: Backend,
        router: Router | None = None,
        route_map: Mapping[str, str] | None = None,
        clock: Clock = time.perf_counter,
        route_notes: Mapping[str, str] | None = None,
        fallback: Fallback | None = None,
    ) -> None:
        self.backend = backend
        self.capabilities = backend.capabilities
        self.drafters = backend.drafters
        self.router = router or CodeProseRouter()
        self.route_map = route_map_for(self.router, backend.drafters, route_map)
        self.named_routes = dict(route_map or {})
        """The classes the run's configuration mapped; the others go by `route_map_for`'s default."""
        self.route_notes = dict(route_notes or {})
        """Why the map sends a class where it does, where the configuration says."""
        self.fallback = fallback
        """Who chooses where a learned router is unsure (the heuristic and its map)."""
        self.clock = clock

    def route_choice(self, prompt: str) -> RouteChoice:
        return route_choice(
            self.router, self.route_map, self.named_routes, prompt, notes=self.route_notes, fallback=self.fallback
        )

    def encode(self, prompt: str, raw: bool) -> list[int]:
        return self.backend.encode(prompt, raw)

    def token_text(self, token_id: int) -> str:
        return self.backend.token_text(token_id)

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        return self.backend.score(prompt_token_ids, token_ids)

    def close(self) -> None:
        self.backend.close()

    def generate(self, request: Request, controls: LiveControls, clock: Clock | None = None) -> Iterator[Event]:
        """Run `request`, reading `controls` before every round; ends with a DoneEvent."""
        if request.mode != "target" and not self.backend.drafters:
            raise ConfigError("draft", f"is needed in {request.mode} mode; give at least one drafter")
        check_supported(controls.settings, self.capabilities)
        check_context(len(request.prompt_token_ids), self.backend.context_length)
        return _Run(self, request, controls, clock or self.clock).events()


def check_context(prompt_tokens: int, context_length: int | None) -> None:
    """A prompt the target cannot attend over is refused before any model work."""
    if context_length is not None and prompt_tokens >= context_length:
        raise ConfigError(
            "prompt",
            f"holds {prompt_tokens} tokens, and the target's context is {context_length}: shorten the prompt",
        )


def _stats(verified: VerifiedDraft, i: int) -> dict[str, float]:
    """What the rule reads at position i beyond its two probabilities: d and what the backend reported."""
    return {"tv": verified.tv_distance[i]} | {name: values[i] for name, values in verified.rule_stats.items()}


def _top(rows: list[list[tuple[int, float]]] | None, i: int) -> tuple[tuple[int, float], ...] | None:
    """Row i of a backend's top-n report, as event data; zero-probability entries (a one-hot's
    filler at temperature 0) say nothing and are dropped."""
    if rows is None or i >= len(rows):
        return None
    return tuple((int(t), float(p)) for t, p in rows[i] if p > 0)


def _rank(verified: VerifiedDraft, i: int) -> int | None:
    """The rank of position i's correction, as event data (None: not known)."""
    if verified.correction_rank is None:
        return None
    rank = verified.correction_rank[i]
    return None if rank is None else int(rank)


def _check_numbers(verified: VerifiedDraft | VerifiedTree, route: str) -> None:
    """A model whose probabilities are not numbers (NaN weights, an overflow) ends the run in one
    line rather than judging with them."""
    for name, values in (("p_target", verified.p_target), ("p_draft", verified.p_draft)):
        # A NaN makes the sum NaN (and min and max unreliable), so the sum is asked first.
        total = sum(values)
        if total != total or (values and (min(values) < 0 or max(values) > 1)):
            who = "the target" if name == "p_target" else f"drafter {route!r}"
            raise ModelError(f"{who} gave probabilities that are not numbers in [0, 1]; check its weights")


class _Run:
    """The state of one generation."""

    def __init__(self, engine: SpecEngine, request: Request, controls: LiveControls, clock: Clock) -> None:
        self.backend, self.clock = engine.backend, clock
        self.request, self.controls = request, controls
        self.settings = controls.settings
        self.rule = self.settings.acceptance_rule
        """The settings' acceptance rule, built once per change of settings (rounds read it often)."""
        self.draws = Draws(request.seed)
        self.metrics = Metrics(speculative=request.mode == "speculative")
        self.auto_route = engine.route_choice(request.prompt).drafter if request.mode != "target" else None
        self.drafter = resolve_route(self.settings.route, self.auto_route) if self.auto_route else None
        """The drafter serving the next round (`none`: no speculation): the route setting resolved."""
        """The drafter of the round to come (under `adaptive`, the last round's until one is chosen)."""
        self.round_router: RoundRouter | None = None
        self.synced: dict[str, int] = {}
        """Committed tokens when each drafter last drafted: what it lacks since is its catch-up."""
        self.proposals: list[tuple[str, int, list[int]]] = []
        """Free proposals not judged yet: (drafter, output tokens when it was made, its tokens)."""
        self.plain: Iterator[int] | None = None
        """The target's own tokens while the route is none, pipelined (`_plain_round`)."""
        if request.mode == "draft" and self.drafter == NONE_ROUTE:
            raise ConfigError("route", "is none, which drafts nothing: a draft-only run needs a drafter's route")
        if request.mode == "speculative" and self.drafter is not None:
            # It learns from every round, so that `adaptive` chosen mid-run starts informed; `none`
            # is one of its choices, for text where every drafter loses.
            routes = [self.drafter, *engine.backend.drafters, NONE_ROUTE]
            # Where the request router sends this prompt to none, its map says the drafters lose
            # on such text: a model drafter is not given a round to find that out again.
            self.round_router = RoundRouter(tuple(dict.fromkeys(routes)), hold_back=self.auto_route == NONE_ROUTE)
            self.synced[self.drafter] = len(request.prompt_token_ids)
        self.policy = self._policy(self.settings)
        self.detokenizer = self.backend.detokenizer()
        context = engine.backend.context_length
        room = context - len(request.prompt_token_ids) if context is not None else request.max_tokens
        self.max_tokens = min(request.max_tokens, room)
        """The request's limit, or less where the target's context ends first (finish: length)."""
        self.generated: list[int] = []
        self.text_parts: list[str] = []
        self.top_n = 0
        self.set_aside_s = 0.0
        """Time spent on counterfactual routes, taken off the lane's clock: not the lane's own work."""
        self.last_end_s = 0.0
        """When the last round or step ended (first: when the prefill did). A round's or step's
        time runs from there, so that the rounds' times add up to the lane's time between tokens."""

    def _now(self) -> float:
        return self.clock() - self.set_aside_s

    def events(self) -> Iterator[Event]:
        self.metrics.start_s = self._now()
        drafting = self.drafter if self.drafter != NONE_ROUTE else None
        models = {"speculative": (None, drafting), "target": (None,), "draft": (self.drafter,)}
        generation = self.backend.open_generation(self.request.prompt_token_ids, prefill=models[self.request.mode])
        self.last_end_s = self._now()
        if self.request.inspect and self.backend.capabilities.top_n:
            self.top_n = TOP_N
        yield StartEvent(
            mode=self.request.mode,
            drafter=self.drafter,
            auto_route=self.auto_route,
            prompt_token_ids=self.request.prompt_token_ids,
            seed=self.request.seed,
            settings=self.settings,
        )
        run = self._rounds(generation) if self.request.mode == "speculative" else self._steps(generation)
        finish = yield from run
        self.detokenizer.finalize()
        self.text_parts.append(self.detokenizer.last_segment)
        metrics = self.metrics.to_dict() | generation.account()
        yield DoneEvent(
            finish_reason=finish, token_ids=tuple(self.generated), text="".join(self.text_parts), metrics=metrics
        )

    def _take_controls(self) -> ControlEvent | None:
        """Adopt settings changed since the last round; say which, at which token."""
        new = self.controls.settings
        if new is self.settings:
            return None
        changes = settings_diff(self.settings, new)
        self.settings, self.rule = new, new.acceptance_rule
        if not changes:
            return None
        names = {name for name, _, _ in changes}
        check_supported(new, self.backend.capabilities)
        if names & _POLICY_FIELDS:
            self.policy = self._policy(new)
        if "route" in names and self.auto_route and new.route != ADAPTIVE_ROUTE:  # adaptive goes on from here
            self.drafter = resolve_route(new.route, self.auto_route)
        return ControlEvent(token_index=len(self.generated), changes=changes)

    @staticmethod
    def _policy(settings: SpecSettings) -> DraftLengthPolicy:
        return make_policy(
            settings.policy, settings.k, settings.policy_params, width=settings.width, tree_nodes=settings.tree_nodes
        )

    def _is_eos(self, token_id: int) -> bool:
        return token_id in self.backend.eos_token_ids and not self.request.ignore_eos

    def _emit(self, committed: Sequence[tuple[int, TokenSource]]) -> tuple[list[Token], FinishReason | None]:
        """Detokenize committed tokens, stopping at EOS (which is not output) or the token limit."""
        out: list[Token] = []
        for token_id, source in committed:
            if self._is_eos(token_id):
                return out, "stop"
            self.detokenizer.add_token(token_id)
            text = self.detokenizer.last_segment
            self.text_parts.append(text)
            self.generated.append(token_id)
            out.append(Token(token_id=token_id, text=text, source=source))
            if len(self.generated) == self.max_tokens:
                return out, "length"
        return out, None

    def _rounds(self, generation: Generation) -> Generator[Event, None, FinishReason]:
        try:
            for index in itertools.count():
                if event := self._take_controls():
                    yield event
                    if {name for name, _, _ in event.changes} & _STREAM_FIELDS:
                        self._close_plain()  # the step in flight was drawn under the old settings
                if self.controls.stop_requested:
                    return "cancelled"
                if self._plain():
                    event, finish = self._plain_round(generation, index)
                else:
                    event, finish = self._round(generation, index)
                yield event
                if finish:
                    return finish
        finally:
            self._close_plain()
        raise AssertionError("unreachable")

    def _close_plain(self) -> None:
        """Rewinds the target's step in flight: the next round drafts from the committed tokens."""
        if self.plain is not None:
            self.plain.close()
            self.plain = None

    def _plain(self) -> bool:
        """Whether the next round is the target's own step: the route is none, and nothing asks the
        round to judge drafts (counterfactual routes) or to choose among drafters (adaptive: its
        rounds that choose none are one-row verify passes; its none stretches are often a few
        rounds long, and each switch away from a pipelined stream throws away the step in flight)."""
        settings = self.settings
        return self.drafter == NONE_ROUTE and not settings.counterfactual and settings.route != ADAPTIVE_ROUTE

    def _plain_round(self, generation: Generation, index: int) -> tuple[RoundEvent, FinishReason | None]:
        """A round of the none route: the target's next token from its own stream (committed as it
        comes), as a round that drafted nothing, its time the verify pass's."""
        start = self._now()
        if self.plain is None:
            self.plain = generation.generate(None, self.settings.sampling, self.draws.one, self.request.pipeline)
        token_id = next(self.plain)
        stepped_at = self._now()
        token_index = len(self.generated)
        tokens, finish = self._emit([(token_id, "target")])
        done_at = self._now()
        event = RoundEvent(
            index=index,
            token_index=token_index,
            drafter=NONE_ROUTE,
            k=0,
            drafted=(),
            positions=(),
            num_accepted=0,
            tokens=tuple(tokens),
            draft_ms=0.0,
            verify_ms=1000 * (stepped_at - start),
            overhead_ms=1000 * (done_at - stepped_at + start - self.last_end_s),
            bonus_top_target=None,
            counterfactuals=(),
            k_asked=0,
        )
        self.policy.update(0, 0, RoundTimes(0.0, event.verify_ms, event.overhead_ms))
        self._learn(event, len(generation.tokens), asked=0)
        self.metrics.add_round(event)
        self.metrics.add_tokens([t.source for t in tokens], done_at)
        self.last_end_s = done_at
        return event, finish

    # One speculative round (Leviathan et al. 2023), in the order gpt-fast writes it:
    #   0. route: under `adaptive`, this round's drafter is chosen; one that sat out rounds first
    #      catches its cache up on the tokens committed meanwhile (timed as drafting);
    #   1. draft: the routed drafter proposes k tokens, keeping p_draft at each position;
    #   2. verify: the target scores all k + 1 positions in one forward pass;
    #   3. judge left to right: keep x_i iff u_i < the rule's acceptance probability a(x_i);
    #   4. at the first rejection a correction is drawn from the residual; if all k are kept,
    #      a bonus token is drawn from the target after them;
    #   5. commit the tokens, and every cache rewinds to them.
    # With a tree (`--width`, `--tree`) steps 1 to 4 draft, verify and judge one (tree.py).
    # Every draw comes from the engine's seeded stream (RoundDraws), so a seed replays the round.
    def _round(self, generation: Generation, index: int) -> tuple[RoundEvent, FinishReason | None]:
        assert self.drafter is not None and self.round_router is not None
        sampling, start = self.settings.sampling, self._now()
        remaining = self.max_tokens - len(self.generated)
        k = min(self.policy.propose(), remaining)
        shape = tree_shape(self.settings.width, self.settings.tree_nodes, k) if self.settings.drafts_trees else None
        draws = RoundDraws.take(self.draws, k if shape is None else shape.nodes)
        keep_drafting = self.policy.keep_drafting if self.policy.stops_early else None

        self._close_plain()  # a live change left the none route: the next round drafts from the committed tokens
        caught_up = self._route(generation, k)  # 0
        caught_up_at = self._now()
        parents: tuple[int, ...] | None = None
        counterfactuals: tuple[Counterfactual, ...] = ()
        bonus_top = None
        if self.drafter != NONE_ROUTE and k > 0 and shape is not None:  # a tree: tree.py's round
            tree = generation.draft_tree(self.drafter, shape, sampling, draws.draft)  # 1
            drafted_at = self._now()
            verified_tree = generation.verify_tree(tree, sampling, draws)  # 2
            verified_at = self._now()
            drafted = tuple(verified_tree.drafted)
            parents = tuple(verified_tree.parents)
            positions, committed = self._judge_tree(verified_tree, draws, remaining)  # 3 and 4
        else:
            if self.drafter == NONE_ROUTE or k == 0:  # no speculation: a round that drafts nothing is a target step
                draft = generation.given_draft([])
            else:
                draft = generation.draft(self.drafter, k, sampling, draws.draft, keep_drafting)  # 1
            drafted_at = self._now()
            counterfactuals = self._counterfactuals(generation, k, draws, keep_drafting, since=drafted_at)
            verified = generation.verify(draft, sampling, self.rule, draws, self.top_n)  # 2
            verified_at = self._now()
            _check_numbers(verified, self.drafter)
            drafted = tuple(verified.drafted)
            positions, committed = self._judge(verified, draws, remaining)  # 3 and 4
            bonus_top = _top(verified.top_target, len(verified.drafted))
        generation.commit([token_id for token_id, _ in committed])  # 5

        token_index = len(self.generated)
        tokens, finish = self._emit(committed)
        num_accepted = sum(position.kept for position in positions)
        done_at = self._now()
        event = RoundEvent(
            index=index,
            token_index=token_index,
            drafter=self.drafter,
            k=len(drafted),
            drafted=drafted,
            positions=tuple(positions),
            num_accepted=num_accepted,
            tokens=tuple(tokens),
            draft_ms=1000 * (drafted_at - start),
            verify_ms=1000 * (verified_at - drafted_at),
            # Everything else since the last round: judging, commit, events, the live controls,
            # and whatever the consumer did between rounds.
            overhead_ms=1000 * (done_at - verified_at + start - self.last_end_s),
            bonus_top_target=bonus_top,
            counterfactuals=counterfactuals,
            catch_up_ms=1000 * (caught_up_at - start) if caught_up else 0.0,
            catch_up_tokens=caught_up,
            parents=parents,
            k_asked=k,
        )
        times = RoundTimes(
            event.draft_ms - event.catch_up_ms,
            event.verify_ms,
            event.overhead_ms,
            verify_rows=None if parents is None else len(parents) + 1,
        )
        # A tree's draft length, for the policy, is its depth: the most it could have kept.
        self.policy.update(event.k if parents is None else max(depths(parents), default=0), num_accepted, times)
        self._learn(event, len(generation.tokens), asked=k)
        self.metrics.add_round(event)
        self.metrics.add_tokens([t.source for t in tokens], done_at)
        self.last_end_s = done_at
        return event, finish

    def _judge_tree(
        self, verified: VerifiedTree, draws: RoundDraws, remaining: int
    ) -> tuple[list[DraftPosition], list[tuple[int, TokenSource]]]:
        """Steps 3 and 4 for a tree (tree.py): the walk from the root, each node recorded as a
        position (its parent row's numbers), the siblings tried and lost as rejected."""
        _check_numbers(verified, self.drafter or "")
        greedy = self.settings.sampling.greedy
        verdict = judge_tree(
            verified.parents,
            verified.drafted,
            accept_probability=verified.accept_probability,
            uniforms=draws.accept,
            row_tokens=verified.row_tokens,
            limit=remaining,
            stops=self._is_eos,
        )
        positions = [
            DraftPosition(
                token_id=token_id,
                p_target=verified.p_target[i],
                p_draft=verified.p_draft[i],
                uniform=draws.accept[i],
                tv_distance=verified.tv_distance[i],
                theta=0.0,
                outcome=verdict.outcomes[i],
                accept_probability=None if greedy else verified.accept_probability[i],
                tv_spent=0.0,
            )
            for i, token_id in enumerate(verified.drafted)
        ]
        return positions, list(verdict.committed)

    def _route(self, generation: Generation, k: int) -> int:
        """Step 0: this round's drafter, caught up; returns the tokens its cache took in."""
        assert self.round_router is not None and self.drafter is not None
        if self.settings.route == ADAPTIVE_ROUTE:
            lags = {name: len(generation.tokens) - self.synced.get(name, 0) for name in self.backend.drafters}
            free = {n: proposed for n in self.backend.drafters if (proposed := generation.proposal(n, k)) is not None}
            proposing = {name: len(proposed) for name, proposed in free.items()}
            self.drafter = self.round_router.choose(k, self.drafter, lags, proposing)
            self._hold_proposals(free)
        if self.drafter == NONE_ROUTE or k == 0 or self.synced.get(self.drafter) == len(generation.tokens):
            return 0  # nothing drafts this round, or the drafter that drafted last round is current
        return generation.catch_up(self.drafter)

    def _hold_proposals(self, free: Mapping[str, list[int]]) -> None:
        """In a greedy, lossless run, the free proposals of the drafters not routed: judged once
        the committed tokens (the target's own greedy ones) reach their end, they tell the round
        router how those drafters would have done, for free."""
        if not (self.settings.sampling.greedy and self.rule.lossless) or self.settings.counterfactual:
            return  # sampled, the committed tokens are not the target's argmax; counterfactual: judged anyway
        for name, proposed in free.items():
            if name != self.drafter and proposed:  # nothing proposed: no round with it to judge
                self.proposals.append((name, len(self.generated), proposed))

    def _judged_proposals(self) -> list[RoundObservation]:
        """The free proposals the committed tokens now judge (untimed); the rest wait."""
        judged, waiting = [], []
        for name, at, proposed in self.proposals:
            kept = kept_of_proposal(proposed, self.generated[at:])
            if kept is None:
                waiting.append((name, at, proposed))
            else:
                judged.append(RoundObservation(name, kept + 1, None))
        self.proposals = waiting
        return judged

    def _learn(self, event: RoundEvent, committed: int, asked: int) -> None:
        """Tell the round router what each drafter did this round; note who is now current (not a
        drafter asked for nothing: it never saw the round's context)."""
        assert self.round_router is not None
        round_ms = event.draft_ms - event.catch_up_ms + event.verify_ms + event.overhead_ms
        others = self._judged_proposals()
        for other in event.counterfactuals:  # its own draft and verify, and the round's host work
            others.append(RoundObservation(other.drafter, other.num_accepted + 1, other.elapsed_ms + event.overhead_ms))
            self.synced[other.drafter] = committed
        # A round that drafted nothing (prompt lookup found nothing to copy) was a target step: it
        # says nothing of its drafter, and under `adaptive` it is known before the round. Under
        # `none` that target step is the choice itself, and what it costs is what `none` is worth.
        judged = event.k or event.drafter == NONE_ROUTE
        verify_ms = event.verify_ms + event.overhead_ms
        routed = RoundObservation(event.drafter, event.num_accepted + 1, round_ms, verify_ms) if judged else None
        self.round_router.observe(routed, others)
        self.round_router.observe_catch_up(event.drafter, event.catch_up_tokens, event.catch_up_ms)
        if asked:
            self.synced[event.drafter] = committed

    def _judge(
        self, verified: VerifiedDraft, draws: RoundDraws, remaining: int
    ) -> tuple[list[DraftPosition], list[tuple[int, TokenSource]]]:
        """Steps 3 and 4: acceptance left to right, stopping at the first rejection (its correction
        committed), an EOS or the token limit; a bonus when none stopped it."""
        greedy = self.settings.sampling.greedy
        positions: list[DraftPosition] = []
        committed: list[tuple[int, TokenSource]] = []
        judging = True
        for i, token_id in enumerate(verified.drafted):
            if not judging:
                positions.append(self._position(verified, i, draws.accept[i], "unreached", None))
                continue
            verdict = judge(
                self.rule,
                greedy=greedy,
                token_id=token_id,
                target_argmax=verified.target_argmax[i],
                p_target_x=verified.p_target[i],
                p_draft_x=verified.p_draft[i],
                stats=_stats(verified, i),
                uniform=draws.accept[i],
            )
            if verdict.accepted:
                outcome: Outcome = "relaxed" if verdict.relaxed else "accepted"
                committed.append((token_id, outcome))
            else:
                outcome = "rejected"
                committed.append((verified.corrections[i], "corrected"))
            positions.append(self._position(verified, i, draws.accept[i], outcome, verdict))
            judging = verdict.accepted and not self._is_eos(token_id) and len(committed) < remaining
        if judging:
            # After a fully accepted draft the target's token is a bonus; after no draft at all
            # (the `none` route, a lookup that found nothing) it is a plain target step's.
            committed.append((verified.bonus, "bonus" if verified.drafted else "target"))
        return positions, committed

    def _position(
        self, verified: VerifiedDraft, i: int, uniform: float, outcome: Outcome, verdict: Verdict | None
    ) -> DraftPosition:
        """Position i as the events record it; `verdict` None where judging stopped before it."""
        tv = verified.tv_distance[i]
        if verdict is None:
            spent = 0.0
        else:  # a backend that knows the rows reports the rule's TV; mentored decoding's is theta * d
            spent = verified.tv_spent[i] if verified.tv_spent is not None else verdict.theta * tv
        return DraftPosition(
            token_id=verified.drafted[i],
            p_target=verified.p_target[i],
            p_draft=verified.p_draft[i],
            uniform=uniform,
            tv_distance=tv,
            theta=self.rule.theta(tv) if verdict is None else verdict.theta,
            outcome=outcome,
            tv_lower=verified.tv_lower[i] if verified.tv_lower is not None else None,
            error_bound=verified.error_bound[i] if verified.error_bound is not None else None,
            top_target=_top(verified.top_target, i),
            top_draft=_top(verified.top_draft, i),
            accept_probability=None if verdict is None else verdict.probability,
            tv_spent=spent,
            correction_rank=_rank(verified, i) if outcome == "rejected" else None,
        )

    def _counterfactuals(
        self,
        generation: Generation,
        k: int,
        draws: RoundDraws,
        keep_drafting: Callable[[Sequence[float]], bool] | None,
        since: float,
    ) -> tuple[Counterfactual, ...]:
        """Every other drafter's proposal from the same context, judged by the same rule with the
        same draws and never committed. From `since` (the lane's clock when drafting ended) to the
        last one's end, the time is taken off the lane's clock."""
        if not self.settings.counterfactual or k == 0:  # a round that drafts nothing has nothing to compare
            return ()
        out = []
        mark = since + self.set_aside_s  # the clock's own reading at `since`
        began = mark
        for drafter in self.backend.drafters:
            if drafter == self.drafter:
                continue
            verified = generation.counterfactual(
                drafter, k=k, sampling=self.settings.sampling, rule=self.rule, draws=draws, keep_drafting=keep_drafting
            )
            positions, _ = self._judge(verified, draws, remaining=k)  # never committed: only its accepted length counts
            now = self.clock()
            out.append(
                Counterfactual(
                    drafter=drafter,
                    drafted=tuple(verified.drafted),
                    num_accepted=sum(position.kept for position in positions),
                    elapsed_ms=1000 * (now - mark),
                )
            )
            mark = now
        self.set_aside_s += mark - began
        return tuple(out)

    def _steps(self, generation: Generation) -> Generator[Event, None, FinishReason]:
        """Target-only or draft-only: one token per step, no acceptance."""
        source: TokenSource = "target" if self.request.mode == "target" else "draft"
        stream: Iterator[int] | None = None
        try:
            while True:
                if event := self._take_controls():
                    yield event
                    if stream is not None and {name for name, _, _ in event.changes} & _STREAM_FIELDS:
                        stream.close()  # drop the step in flight so the change applies to the next token
                        stream = None
                if self.controls.stop_requested:
                    return "cancelled"
                if stream is None:
                    stream = generation.generate(
                        self.drafter, self.settings.sampling, self.draws.one, self.request.pipeline
                    )
                token_index = len(self.generated)
                tokens, finish = self._emit([(next(stream), source)])
                done_at = self._now()
                if tokens:
                    # From the last step's end, as a round's time is: the yardstick of c and of a
                    # round's cost in target steps must count what the lane's tokens/s counts.
                    step_ms = 1000 * (done_at - self.last_end_s)
                    step = StepEvent(token_index=token_index, drafter=self.drafter, token=tokens[0], step_ms=step_ms)
                    self.last_end_s = done_at
                    self.metrics.add_step(step)
                    self.metrics.add_tokens([source], done_at)
                    yield step
                if finish:
                    return finish
        finally:
            if stream is not None:
                stream.close()
