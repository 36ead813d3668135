"""The generation loop: speculative, target-only and draft-only over one Backend.

A speculative round: the routed drafter drafts k tokens keeping its distribution at each
position; the target scores all k + 1 positions in one forward pass; acceptance runs left to
right; the first rejection takes a correction from the residual; a fully accepted round earns a
bonus token from the target; the caches rewind to the committed tokens.

The engine owns the one seeded random source and every decision, and reports through events.
It knows nothing of a UI, HTTP, files or any model library; its clock is injected.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from specplay.engine.accept import PositionStats, judge, mentored_theta
from specplay.engine.backend import Backend, Generation, VerifiedDraft
from specplay.engine.capabilities import check_supported
from specplay.engine.controls import LiveControls, settings_diff
from specplay.engine.draws import Draws
from specplay.engine.events import (
    ControlEvent,
    Counterfactual,
    DoneEvent,
    DraftPosition,
    Event,
    FinishReason,
    Outcome,
    RoundEvent,
    Source,
    StartEvent,
    StepEvent,
    Token,
)
from specplay.engine.metrics import Metrics
from specplay.engine.policies import make_policy
from specplay.engine.request import Request
from specplay.engine.router import CodeProseRouter, RouteChoice, Router, resolve_route, route_choice, route_map_for
from specplay.engine.source import Clock
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
}
_STREAM_FIELDS = {"route", "temperature", "top_p", "top_k", "min_p"}
TOP_N = 5
"""Candidates per distribution an inspecting request reports."""


class SpecEngine:
    """The event source of speculative decoding (and target-only, draft-only) over a backend."""

    def __init__(
        self,
        backend: Backend,
        router: Router | None = None,
        route_map: Mapping[str, str] | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.backend = backend
        self.capabilities = backend.capabilities
        self.drafters = backend.drafters
        self.router = router or CodeProseRouter()
        self.route_map = route_map_for(self.router, backend.drafters, route_map)
        self.named_routes = dict(route_map or {})
        """The classes the run's configuration mapped; the others go by `route_map_for`'s default."""
        self.clock = clock

    def route_choice(self, prompt: str) -> RouteChoice:
        return route_choice(self.router, self.route_map, self.named_routes, prompt)

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


def _stats(verified: VerifiedDraft, i: int) -> PositionStats:
    """What the rules read at position i beyond its two probabilities (None where not reported)."""
    entropy, max_p_target, max_p_draft = verified.entropy, verified.max_p_target, verified.max_p_draft
    return PositionStats(
        verified.tv_distance[i],
        entropy[i] if entropy is not None else None,
        max_p_target[i] if max_p_target is not None else None,
        max_p_draft[i] if max_p_draft is not None else None,
    )


def _top(rows: list[list[tuple[int, float]]] | None, i: int) -> tuple[tuple[int, float], ...] | None:
    """Row i of a backend's top-n report, as event data; zero-probability entries (a one-hot's
    filler at temperature 0) say nothing and are dropped."""
    if rows is None or i >= len(rows):
        return None
    return tuple((int(t), float(p)) for t, p in rows[i] if p > 0)


def _bracket(verified: VerifiedDraft, i: int) -> tuple[float | None, float | None]:
    """(tv_lower, error_bound) at position i, when the backend knew only the top-K."""
    tv_lower = verified.tv_lower[i] if verified.tv_lower is not None else None
    error_bound = verified.error_bound[i] if verified.error_bound is not None else None
    return tv_lower, error_bound


def _check_numbers(verified: VerifiedDraft, route: str) -> None:
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
        self.route = resolve_route(self.settings.route, self.auto_route) if self.auto_route else None
        self.policy = make_policy(self.settings.policy, self.settings.k, self.settings.policy_params)
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
        models = {"speculative": (None, self.route), "target": (None,), "draft": (self.route,)}
        generation = self.backend.open_generation(self.request.prompt_token_ids, prefill=models[self.request.mode])
        self.last_end_s = self._now()
        if self.request.inspect and self.backend.capabilities.top_n:
            self.top_n = TOP_N
        yield StartEvent(
            self.request.mode,
            self.route,
            self.auto_route,
            self.request.prompt_token_ids,
            self.request.seed,
            self.settings,
        )
        run = self._rounds(generation) if self.request.mode == "speculative" else self._steps(generation)
        finish = yield from run
        self.detokenizer.finalize()
        self.text_parts.append(self.detokenizer.last_segment)
        metrics = self.metrics.to_dict() | generation.account()
        yield DoneEvent(finish, tuple(self.generated), "".join(self.text_parts), metrics)

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
            self.policy = make_policy(new.policy, new.k, new.policy_params)
        if "route" in names and self.auto_route:
            self.route = resolve_route(new.route, self.auto_route)
        return ControlEvent(len(self.generated), changes)

    def _emit(self, committed: Sequence[tuple[int, Source]]) -> tuple[list[Token], FinishReason | None]:
        """Detokenize committed tokens, stopping at EOS (which is not output) or the token limit."""
        out: list[Token] = []
        for token_id, source in committed:
            if token_id in self.backend.eos_token_ids and not self.request.ignore_eos:
                return out, "stop"
            self.detokenizer.add_token(token_id)
            text = self.detokenizer.last_segment
            self.text_parts.append(text)
            self.generated.append(token_id)
            out.append(Token(token_id, text, source))
            if len(self.generated) == self.max_tokens:
                return out, "length"
        return out, None

    def _ends(self, token_id: int, num_tokens: int, remaining: int) -> bool:
        eos = token_id in self.backend.eos_token_ids and not self.request.ignore_eos
        return eos or num_tokens == remaining

    def _rounds(self, generation: Generation) -> Generator[Event, None, FinishReason]:
        for index in itertools.count():
            if event := self._take_controls():
                yield event
            if self.controls.stop_requested:
                return "cancelled"
            assert self.route is not None
            start = self._now()
            sampling, rule = self.settings.sampling, self.rule
            remaining = self.max_tokens - len(self.generated)
            k = min(self.policy.propose(), remaining)
            # Every draw of the round comes from the engine's generator, in a fixed layout:
            # k to draft, k to accept, k for corrections, one for the bonus.
            uniforms = self.draws.take(3 * k + 1)
            keep_drafting = self.policy.keep_drafting if self.policy.stops_early else None
            draft = generation.draft(self.route, k, sampling, uniforms[:k], keep_drafting)
            drafted_at = self._now()
            counterfactuals = self._counterfactuals(generation, k, uniforms, keep_drafting, remaining, drafted_at)
            verified = generation.verify(draft, sampling, rule, uniforms[2 * k : 3 * k], uniforms[3 * k], self.top_n)
            verified_at = self._now()
            _check_numbers(verified, self.route)

            positions, committed = self._judge(verified, uniforms[k : 2 * k], remaining)
            generation.commit([token_id for token_id, _ in committed])
            token_index = len(self.generated)
            tokens, finish = self._emit(committed)
            num_accepted = sum(p.outcome in ("accepted", "budget") for p in positions)
            self.policy.update(len(verified.drafted), num_accepted)
            done_at = self._now()

            event = RoundEvent(
                index=index,
                token_index=token_index,
                route=self.route,
                k=len(verified.drafted),
                drafted=tuple(verified.drafted),
                positions=tuple(positions),
                num_accepted=num_accepted,
                tokens=tuple(tokens),
                draft_ms=1000 * (drafted_at - start),
                verify_ms=1000 * (verified_at - drafted_at),
                # Everything else since the last round: judging, commit, events, the live controls,
                # and whatever the consumer did between rounds.
                overhead_ms=1000 * (done_at - verified_at + start - self.last_end_s),
                bonus_top_target=_top(verified.top_target, len(verified.drafted)),
                counterfactuals=counterfactuals,
            )
            self.metrics.add_round(event)
            self.metrics.add_tokens([t.source for t in tokens], done_at)
            self.last_end_s = done_at
            yield event
            if finish:
                return finish
        raise AssertionError("unreachable")

    def _counterfactuals(
        self,
        generation: Generation,
        k: int,
        uniforms: Sequence[float],
        keep_drafting: Callable[[Sequence[float]], bool] | None,
        remaining: int,
        since: float,
    ) -> tuple[Counterfactual, ...]:
        """Every other drafter's proposal from the same context, judged by the same rule with the
        same draws and never committed. From `since` (the lane's clock when drafting ended) to the
        last one's end, the time is taken off the lane's clock."""
        if not self.settings.counterfactual:
            return ()
        out = []
        mark = since + self.set_aside_s  # the clock's own reading at `since`
        began = mark
        for drafter in self.backend.drafters:
            if drafter == self.route:
                continue
            verified = generation.counterfactual(drafter, k, self.settings.sampling, self.rule, uniforms, keep_drafting)
            positions, _ = self._judge(verified, uniforms[k : 2 * k], remaining)
            accepted = sum(p.outcome in ("accepted", "budget") for p in positions)
            now = self.clock()
            out.append(Counterfactual(drafter, tuple(verified.drafted), accepted, 1000 * (now - mark)))
            mark = now
        self.set_aside_s += mark - began
        return tuple(out)

    def _judge(
        self, verified: VerifiedDraft, accept_uniforms: Sequence[float], remaining: int
    ) -> tuple[list[DraftPosition], list[tuple[int, Source]]]:
        """Acceptance left to right; stops at the first rejection, an EOS, or the token limit."""
        rule, greedy = self.rule, self.settings.sampling.greedy
        positions: list[DraftPosition] = []
        committed: list[tuple[int, Source]] = []
        judging = True
        for i, token_id in enumerate(verified.drafted):
            uniform, stats = accept_uniforms[i], _stats(verified, i)
            p_target, p_draft, tv = verified.p_target[i], verified.p_draft[i], stats.tv
            # tv_lower, error_bound, top_target, top_draft: DraftPosition's fields after outcome
            seen = (*_bracket(verified, i), _top(verified.top_target, i), _top(verified.top_draft, i))
            if not judging:
                theta = mentored_theta(tv, rule.tv_budget) if rule.name == "mentored" else 0.0
                positions.append(
                    DraftPosition(token_id, p_target, p_draft, uniform, tv, theta, "unreached", *seen, None, 0.0)
                )
                continue
            verdict = judge(token_id, p_target, p_draft, stats, verified.target_argmax[i], rule, greedy, uniform)
            if verdict.accepted:
                outcome: Outcome = "budget" if verdict.by_budget else "accepted"
                committed.append((token_id, outcome))
            else:
                outcome = "rejected"
                committed.append((verified.corrections[i], "corrected"))
                judging = False
            spent = verified.tv_spent[i] if verified.tv_spent is not None else verdict.theta * tv
            positions.append(
                DraftPosition(
                    token_id, p_target, p_draft, uniform, tv, verdict.theta, outcome, *seen, verdict.probability, spent
                )
            )
            if self._ends(committed[-1][0], len(committed), remaining):
                judging = False
        if judging:
            committed.append((verified.bonus, "bonus"))
        return positions, committed

    def _steps(self, generation: Generation) -> Generator[Event, None, FinishReason]:
        """Target-only or draft-only: one token per step, no acceptance."""
        source: Source = "target" if self.request.mode == "target" else "draft"
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
                        self.route, self.settings.sampling, self.draws.one, self.request.pipeline
                    )
                token_index = len(self.generated)
                tokens, finish = self._emit([(next(stream), source)])
                done_at = self._now()
                if tokens:
                    # From the last step's end, as a round's time is: the yardstick of c and of a
                    # round's cost in target steps must count what the lane's tokens/s counts.
                    step = StepEvent(token_index, self.route, tokens[0], 1000 * (done_at - self.last_end_s))
                    self.last_end_s = done_at
                    self.metrics.add_step(step)
                    self.metrics.add_tokens([source], done_at)
                    yield step
                if finish:
                    return finish
        finally:
            if stream is not None:
                stream.close()
