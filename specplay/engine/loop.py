"""The generation loop: speculative, target-only and draft-only over one Backend.

A run keeps the run's state: the committed tokens, the draft-length policy, the route and its
books, the metrics. For each speculative round it chooses the drafter and the shape, asks
round.py for the round (`reference_round.py` is the same round in plain numpy, which the tests
hold the engine to), commits its tokens and emits its event.

The engine owns the one seeded random source and every decision, and reports through events.
It knows nothing of a UI, HTTP, files or any model library; its clock is injected.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from specplay.engine.backend_protocol import Backend, Generation
from specplay.engine.capabilities import check_supported
from specplay.engine.conversation import Exchange
from specplay.engine.draws import Draws, RoundDraws
from specplay.engine.events import (
    ControlEvent,
    DoneEvent,
    Event,
    FinishReason,
    RoundEvent,
    StartEvent,
    StepEvent,
    TokenSource,
)
from specplay.engine.live_controls import LiveControls, settings_diff
from specplay.engine.metrics import Metrics
from specplay.engine.output import Output
from specplay.engine.policies import RoundTimes, settings_policy
from specplay.engine.request import Request
from specplay.engine.round import RoundAsk, run_round
from specplay.engine.routers.drafter_books import DrafterBooks
from specplay.engine.routers.rounds import RoundRouter
from specplay.engine.routers.routing import Routing, resolve_route, routing_for
from specplay.engine.settings import ADAPTIVE_ROUTE, NONE_ROUTE, POLICY_FIELDS, STREAM_FIELDS, Mode
from specplay.engine.stream import Clock
from specplay.engine.tree import tree_shape
from specplay.errors import ConfigError

TOP_N = 5
"""Candidates per distribution an inspecting request reports."""


class SpecEngine:
    """The event stream of speculative decoding (and target-only, draft-only) over a backend."""

    def __init__(self, backend: Backend, routing: Routing | None = None, clock: Clock = time.perf_counter) -> None:
        self.backend = backend
        self.capabilities = backend.capabilities
        self.drafters = backend.drafters
        self.routing = routing or routing_for(backend.drafters)
        self.clock = clock
        self.kept: dict[Mode, Generation] = {}
        """Each mode's last generation that ended, its caches kept for the conversation's next turn."""

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        return self.backend.encode(prompt, raw, earlier)

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
        # The none route drafts nothing: a speculative lane of target steps needs no drafter.
        drafts = request.mode == "draft" or controls.settings.route != NONE_ROUTE
        if request.mode != "target" and drafts and not self.backend.drafters:
            raise ConfigError("draft", f"is needed in {request.mode} mode; give at least one drafter")
        check_supported(controls.settings, self.capabilities)
        check_context(len(request.prompt_token_ids), self.backend.context_length)
        previous = self.kept.pop(request.mode, None)  # a new conversation lets the old caches go
        return _Run(self, request, controls, clock or self.clock).events(previous if request.continues else None)


def check_context(prompt_tokens: int, context_length: int | None) -> None:
    """A prompt the target cannot attend over is refused before any model work."""
    if context_length is not None and prompt_tokens >= context_length:
        raise ConfigError(
            "prompt",
            f"holds {prompt_tokens} tokens, and the target's context is {context_length}: shorten the prompt",
        )


class _Run:
    """The state of one generation."""

    def __init__(self, engine: SpecEngine, request: Request, controls: LiveControls, clock: Clock) -> None:
        self.backend, self.clock, self.kept = engine.backend, clock, engine.kept
        self.request, self.controls = request, controls
        self.settings = controls.settings
        self.rule = self.settings.acceptance_rule
        """The settings' acceptance rule, built once per change of settings (rounds read it often)."""
        self.draws = Draws(request.seed)
        self.metrics = Metrics(speculative=request.mode == "speculative")
        self.auto_route = engine.routing.choice(request.prompt).drafter if request.mode != "target" else None
        self.drafter = resolve_route(self.settings.route, self.auto_route) if self.auto_route else None
        """The drafter of the round to come (`none`: no speculation): the route setting resolved;
        under `adaptive`, the last round's until one is chosen."""
        self.books: DrafterBooks | None = None
        """Per-round routing's books on the drafters (speculative runs only)."""
        self.plain: Iterator[int] | None = None
        """The target's own tokens while the route is none, pipelined (`_plain_round`)."""
        if request.mode == "draft" and self.drafter == NONE_ROUTE:
            raise ConfigError("route", "is none, which drafts nothing: a draft-only run needs a drafter's route")
        if request.mode == "speculative" and self.drafter is not None:
            # It learns from every round, so that `adaptive` chosen mid-run starts informed; `none`
            # is one of its choices, for text where every drafter loses. Where the request router
            # sends this prompt to none, its map says the drafters lose on such text: a model
            # drafter is not given a round to find that out again.
            routes = tuple(dict.fromkeys([self.drafter, *engine.backend.drafters, NONE_ROUTE]))
            router = RoundRouter(routes, hold_back=self.auto_route == NONE_ROUTE)
            self.books = DrafterBooks(router, engine.backend.drafters, self.drafter, len(request.prompt_token_ids))
        self.policy = settings_policy(self.settings)
        context = engine.backend.context_length
        room = context - len(request.prompt_token_ids) if context is not None else request.max_tokens
        self.output = Output(self.backend.detokenizer(), self._ends_text, max_tokens=min(request.max_tokens, room))
        self.top_n = TOP_N if request.inspect and self.backend.capabilities.top_n else 0
        self.set_aside_s = 0.0
        """Time spent on counterfactual routes, taken off the lane's clock: not the lane's own work."""
        self.last_end_s = 0.0
        """When the last round or step ended (first: when the prefill did). A round's or step's
        time runs from there, so that the rounds' times add up to the lane's time between tokens."""

    def _ends_text(self, token_id: int) -> bool:
        return token_id in self.backend.eos_token_ids and not self.request.ignore_eos

    def _now(self) -> float:
        return self.clock() - self.set_aside_s

    def events(self, previous: Generation | None) -> Iterator[Event]:
        self.metrics.start_s = self._now()
        drafting = self.drafter if self.drafter != NONE_ROUTE else None
        models = {"speculative": (None, drafting), "target": (None,), "draft": (self.drafter,)}
        prompt = self.request.prompt_token_ids
        generation = self.backend.open_generation(prompt, prefill=models[self.request.mode], previous=previous)
        self.last_end_s = self._now()
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
        text = self.output.text()
        self.kept[self.request.mode] = generation  # ended between rounds: its caches hold committed tokens only
        if self.request.mode != "draft":  # the target's text (a draft-only lane's is the drafter's)
            generation.remember()
        metrics = self.metrics.to_dict() | generation.account()
        yield DoneEvent(finish_reason=finish, token_ids=tuple(self.output.token_ids), text=text, metrics=metrics)

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
        if names & POLICY_FIELDS:
            self.policy = settings_policy(new)
        if "route" in names and self.auto_route and new.route != ADAPTIVE_ROUTE:  # adaptive goes on from here
            self.drafter = resolve_route(new.route, self.auto_route)
        return ControlEvent(token_index=len(self.output), changes=changes)

    def _rounds(self, generation: Generation) -> Generator[Event, None, FinishReason]:
        try:
            for index in itertools.count():
                if event := self._take_controls():
                    yield event
                    if {name for name, _, _ in event.changes} & STREAM_FIELDS:
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
        token_index = len(self.output)
        tokens, finish = self.output.add([(token_id, "target")])
        done_at = self._now()
        event = RoundEvent(
            index=index,
            token_index=token_index,
            drafter=NONE_ROUTE,
            drafted=(),
            parents=(),
            positions=(),
            num_accepted=0,
            tokens=tuple(tokens),
            draft_ms=0.0,
            verify_ms=1000 * (stepped_at - start),
            overhead_ms=1000 * (done_at - stepped_at + start - self.last_end_s),
            k_asked=0,
        )
        self._account(event, generation, done_at, asked=0)
        return event, finish

    def _round(self, generation: Generation, index: int) -> tuple[RoundEvent, FinishReason | None]:
        """One speculative round (round.py), its drafter chosen and caught up first (step 0)."""
        assert self.drafter is not None and self.books is not None
        settings, start = self.settings, self._now()
        remaining = self.output.remaining
        k = min(self.policy.propose(), remaining)
        shape = tree_shape(settings.width, settings.tree_nodes, k)
        self._close_plain()  # a live change left the none route: the next round drafts from the committed tokens
        if settings.route == ADAPTIVE_ROUTE:
            hold_free = settings.sampling.greedy and self.rule.lossless and not settings.counterfactual
            self.drafter = self.books.choose(generation, k, self.drafter, len(self.output), hold_free)
        caught_up = self.books.catch_up(generation, self.drafter, k)  # 0
        caught_up_at = self._now()
        ask = RoundAsk(
            drafter=self.drafter,
            shape=shape,
            sampling=settings.sampling,
            rule=self.rule,
            draws=RoundDraws.take(self.draws, shape.nodes),
            limit=remaining,
            stops=self.output.is_eos,
            keep_drafting=self.policy.keep_drafting if self.policy.stops_early else None,
            top_n=self.top_n,
            compare_with=tuple(d for d in self.backend.drafters if d != self.drafter)
            if settings.counterfactual
            else (),
        )
        result = run_round(generation, ask, self._now)  # 1 to 4
        self.set_aside_s += result.set_aside_s
        generation.commit([token_id for token_id, _ in result.committed])  # 5
        token_index = len(self.output)
        tokens, finish = self.output.add(result.committed)
        done_at = self._now()
        event = RoundEvent(
            index=index,
            token_index=token_index,
            drafter=self.drafter,
            drafted=result.drafted,
            parents=result.parents,
            positions=result.positions,
            num_accepted=result.num_accepted,
            tokens=tuple(tokens),
            draft_ms=1000 * (result.drafted_at - start),
            verify_ms=1000 * (result.verified_at - result.drafted_at),
            # Everything else since the last round: judging, commit, events, the live controls,
            # and whatever the consumer did between rounds.
            overhead_ms=1000 * (done_at - result.verified_at + start - self.last_end_s),
            bonus_top_target=result.bonus_top_target,
            counterfactuals=result.counterfactuals,
            catch_up_ms=1000 * (caught_up_at - start) if caught_up else 0.0,
            catch_up_tokens=caught_up,
            k_asked=k,
            origin=result.origin,
        )
        self._account(event, generation, done_at, asked=k)
        return event, finish

    def _account(self, event: RoundEvent, generation: Generation, done_at: float, asked: int) -> None:
        """A round's record in the policy, the drafters' books and the metrics."""
        assert self.books is not None
        times = RoundTimes(event.draft_ms - event.catch_up_ms, event.verify_ms, event.overhead_ms, event.nodes + 1)
        self.policy.update(event.depth, event.num_accepted, times)
        self.books.learn(event, len(generation.tokens), self.output.token_ids, asked)
        self.metrics.add_round(event)
        self.metrics.add_tokens([t.source for t in event.tokens], done_at)
        self.last_end_s = done_at

    def _steps(self, generation: Generation) -> Generator[Event, None, FinishReason]:
        """Target-only or draft-only: one token per step, no acceptance."""
        source: TokenSource = "target" if self.request.mode == "target" else "draft"
        stream: Iterator[int] | None = None
        try:
            while True:
                if event := self._take_controls():
                    yield event
                    if stream is not None and {name for name, _, _ in event.changes} & STREAM_FIELDS:
                        stream.close()  # drop the step in flight so the change applies to the next token
                        stream = None
                if self.controls.stop_requested:
                    return "cancelled"
                if stream is None:
                    stream = generation.generate(
                        self.drafter, self.settings.sampling, self.draws.one, self.request.pipeline
                    )
                token_index = len(self.output)
                tokens, finish = self.output.add([(next(stream), source)])
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
