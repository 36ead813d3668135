"""What a round costs where the user runs: the target's verify pass over n rows, for n = 1..max,
one target step, and each drafter's step. `speedup.predict_by_k` turns these into a speedup per k.

A verify pass is not "one target step": its time is a curve in the number of rows it scores, with
steps where kernels change (a row-wise kernel for a few rows, a matrix multiply for more). So it is
measured row count by row count, through the same Generation calls a round makes (draft, verify,
then a commit of nothing, which rewinds every cache), so what is timed is what a round pays:
the forward pass and the acceptance work after it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specplay.engine.backend_protocol import Generation
from specplay.engine.controls import LiveControls
from specplay.engine.draws import Draws, RoundDraws
from specplay.engine.events import RoundEvent, StepEvent
from specplay.engine.loop import Clock, SpecEngine
from specplay.engine.metrics import Metrics
from specplay.engine.request import Request
from specplay.engine.rules import AcceptanceRule
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.speedup import KPrediction, predict_by_k
from specplay.errors import ConfigError

MAX_ROWS = 16
REPEATS = 9
"""Timings per row count: on a busy machine fewer leave the median of each row count noisy."""
DRAFT_STEPS = 4
"""Tokens drafted by the longer of the two timed drafts (the other drafts one): their difference is
the time per drafted token, the rest of a one-token draft the call's own (`RoundCosts.draft_call_ms`)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """The median of repeated timings, and their spread (max - min)."""

    ms: float
    spread_ms: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Timing:
        return cls(statistics.median(samples_ms), max(samples_ms) - min(samples_ms))


@dataclass(frozen=True)
class RoundCosts:
    """Measured at one context length (the prompt's), on one machine."""

    target_step_ms: Timing
    """One target-only step as the engine times it, host work included (the yardstick of every
    speedup specplay predicts)."""
    verify_ms: dict[int, Timing]
    """A verify pass by rows scored: k drafted tokens make k + 1 rows (1 row: a target step)."""
    draft_step_ms: dict[str, Timing] = field(default_factory=dict)
    """Each drafter's time per drafted token (prompt lookup: close to 0)."""
    draft_call_ms: dict[str, Timing] = field(default_factory=dict)
    """Each drafter's time per draft call whatever its length, timed alone (building and syncing
    the work); a real round's fixed part is larger (`RoundsMeasured.draft_costs`)."""
    includes_http: bool = False
    """Remote models: every time holds an HTTP round trip."""

    def call_ms(self, drafter: str) -> float:
        """`drafter`'s time per draft call (0 where it was not measured apart)."""
        return self.draft_call_ms[drafter].ms if drafter in self.draft_call_ms else 0.0

    def cost_ratio(self, drafter: str) -> float:
        """c: a drafted token's time over a target step's."""
        return self.draft_step_ms[drafter].ms / self.target_step_ms.ms


@dataclass(frozen=True)
class RoundsMeasured:
    """What a drafter's own rounds measured, which a prediction takes before the timings above:
    acceptance by position, the drafter's time per round in real rounds (catching its cache up on
    the tokens committed since included) and the host's work per round."""

    acceptance_per_position: list[float]
    """Kept over drafted at each position, over the rounds that drafted that far (the metric)."""
    drafted_share: list[float]
    """Of all rounds, those that drafted at least i tokens (1.0 throughout for a model drafter)."""
    kept_share: list[float]
    """Of all rounds, those that kept at least i drafted tokens."""
    host_ms: float
    draft_round_ms: float
    """Their drafting time per round (`draft_costs` takes it apart)."""
    mean_drafted: float
    """Tokens drafted per round."""

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> RoundsMeasured:
        """From a speculative lane's metrics (engine/metrics.py's names)."""
        rounds, drafted = metrics.get("num_spec_steps") or 0, metrics.get("num_draft_tokens") or 0
        per_drafted = list(metrics.get("num_drafted_per_position") or [])
        per_kept = list(metrics.get("num_accepted_per_position") or [])
        return cls(
            acceptance_per_position=list(metrics.get("acceptance_per_position") or []),
            drafted_share=[n / rounds for n in per_drafted] if rounds else [],
            kept_share=[n / rounds for n in per_kept] if rounds else [],
            host_ms=(metrics.get("overhead_ms") or 0.0) / rounds if rounds else 0.0,
            draft_round_ms=(metrics.get("draft_ms") or 0.0) / rounds if rounds else 0.0,
            mean_drafted=drafted / rounds if rounds else 0.0,
        )

    @classmethod
    def of_rounds(cls, rounds: Iterable[RoundEvent]) -> RoundsMeasured:
        """From rounds themselves (a session's, or a run's without those the engine cut short to
        end at max_tokens: leave those out, or they read as a drafter that drafts less)."""
        metrics = Metrics(speculative=True)
        for event in rounds:
            metrics.add_round(event)
        return cls.of(metrics.to_dict())

    def asked(self, k: int) -> RoundsMeasured:
        """These rounds as asked for k drafts each: positions no round reached were drafted by
        none (prompt lookup found nothing that long), not unmeasured, so their shares are 0."""
        pad = [0.0] * max(0, k - len(self.drafted_share))
        return replace(self, drafted_share=[*self.drafted_share, *pad], kept_share=[*self.kept_share, *pad])

    def draft_costs(self, draft_step_ms: float, draft_call_ms: float = 0.0) -> tuple[float, float]:
        """(per drafted token, per round) in ms: these rounds' drafting time taken apart, the
        step as timed alone (the difference of two draft lengths, which nothing else in a round
        touches) and the rest of a round's drafting its fixed part, whatever a real round adds
        to a draft call alone (the tokens committed since, work the last round left pending).
        The times given where the rounds drafted nothing."""
        if self.mean_drafted <= 0:
            return draft_step_ms, draft_call_ms
        step = min(draft_step_ms, self.draft_round_ms / self.mean_drafted)
        return step, self.draft_round_ms - step * self.mean_drafted

    def predict(
        self,
        verify_ms: Mapping[int, float],
        draft_step_ms: float,
        target_step_ms: float,
        k_max: int,
        draft_call_ms: float = 0.0,
    ) -> list[KPrediction]:
        """`speedup.predict_by_k` from these rounds: what each k would give on their text.
        `draft_step_ms` and `draft_call_ms`: the drafter's times as measured alone (`draft_costs`)."""
        step_ms, call_ms = self.draft_costs(draft_step_ms, draft_call_ms)
        return predict_by_k(
            self.kept_share,
            verify_ms,
            step_ms,
            target_step_ms,
            k_max,
            host_ms=self.host_ms,
            drafted_share=self.drafted_share,
            draft_call_ms=call_ms,
        )


def measure_costs(
    engine: SpecEngine,
    prompt_token_ids: Sequence[int],
    sampling: SamplingParams,
    rule: AcceptanceRule,
    max_rows: int = MAX_ROWS,
    repeats: int = REPEATS,
    pipeline: bool = True,
) -> RoundCosts:
    """Time the target's step, its verify pass over 2..max_rows rows and every drafter's step after
    the prompt, on the engine's clock. Each timing is taken `repeats` times after one untimed
    warm-up; row counts are visited up and down in turn, so a machine's drift spreads over all of
    them alike. `pipeline`: as the target-only runs compared with (a playground's lanes take turns
    and do not pipeline)."""
    if max_rows < 2 or repeats < 1:
        raise ConfigError("max_rows", f"must be 2 or more and repeats 1 or more (got {max_rows}, {repeats})")
    backend, clock, draws = engine.backend, engine.clock, Draws(seed=0)
    # Every prediction is in target steps: timed before and after the rest and pooled, so a slow
    # phase of the machine at one end does not skew every ratio.
    target_step = _target_step_ms(engine, prompt_token_ids, sampling, repeats=repeats, pipeline=pipeline)
    verify: dict[int, list[float]] = {}
    drafts: dict[str, tuple[list[float], list[float]]] = {}
    for drafter in backend.drafters:
        generation = backend.open_generation(prompt_token_ids, prefill=(None, drafter))
        drafts[drafter] = _draft_ms(generation, drafter, sampling, repeats=repeats, draws=draws, clock=clock)
        if len(verify) < max_rows - 1:  # the curve from the first drafter that drafts every length asked
            verify = (
                _verify_curve(
                    generation, drafter, sampling, rule, max_rows=max_rows, repeats=repeats, draws=draws, clock=clock
                )
                | verify
            )
    if not verify:
        raise ConfigError("draft", "costs need a drafter to time the verify pass; name one with --draft")
    target_step += _target_step_ms(engine, prompt_token_ids, sampling, repeats=repeats, pipeline=pipeline)
    verify[1] = target_step  # one row, nothing drafted: a target step
    return RoundCosts(
        target_step_ms=Timing.of(target_step),
        verify_ms={rows: Timing.of(samples) for rows, samples in sorted(verify.items())},
        draft_step_ms={name: Timing.of(steps) for name, (steps, _) in drafts.items()},
        draft_call_ms={name: Timing.of(calls) for name, (_, calls) in drafts.items()},
        includes_http=not backend.capabilities.wall_time_is_speed,
    )


def _target_step_ms(
    engine: SpecEngine, prompt: Sequence[int], sampling: SamplingParams, *, repeats: int, pipeline: bool
) -> list[float]:
    """A target-only run's steps after its first, as the engine times them (the time between one
    token and the next, host work included): the target-only side of every measured speedup."""
    request = Request("", tuple(prompt), "target", 0, repeats + 2, ignore_eos=True, pipeline=pipeline)
    controls = LiveControls(SpecSettings(sampling=sampling), ())
    steps = [e.step_ms for e in engine.generate(request, controls) if isinstance(e, StepEvent)]
    return steps[2:]  # the first is the prompt's, the second the warm-up


def _draft_ms(
    generation: Generation, drafter: str, sampling: SamplingParams, *, repeats: int, draws: Draws, clock: Clock
) -> tuple[list[float], list[float]]:
    """Samples of (time per drafted token, time per call): a draft of one token and one of
    DRAFT_STEPS tokens, timed in turn; the difference is the steps', the rest the call's."""

    def timed(k: int) -> float:
        start = clock()
        generation.draft(drafter, k, sampling, draws.take(k), None)
        elapsed_ms = 1000 * (clock() - start)
        generation.commit([])  # nothing kept: every cache back to the prompt
        return elapsed_ms

    steps, calls = [], []
    for i in range(repeats + 1):
        one, longer = timed(1), timed(DRAFT_STEPS)
        if i:  # the first pair is the warm-up
            step = max(0.0, (longer - one) / (DRAFT_STEPS - 1))
            steps.append(step)
            calls.append(max(0.0, one - step))
    return steps, calls


def _verify_curve(
    generation: Generation,
    drafter: str,
    sampling: SamplingParams,
    rule: AcceptanceRule,
    *,
    max_rows: int,
    repeats: int,
    draws: Draws,
    clock: Clock,
) -> dict[int, list[float]]:
    """Verify-pass times by rows scored. Rows are what was drafted plus one: a drafter that drafts
    fewer than asked (prompt lookup finding no match) gives the rows it gave."""
    samples: dict[int, list[float]] = {}
    order = list(range(2, max_rows + 1))  # a round drafts at least one token
    for i in range(repeats + 1):
        for rows in order if i % 2 else reversed(order):
            k = rows - 1
            round_draws = RoundDraws.take(draws, k)
            draft = generation.draft(drafter, k, sampling, round_draws.draft, None)
            start = clock()
            verified = generation.verify(draft, sampling, rule, round_draws)
            elapsed_ms = 1000 * (clock() - start)
            generation.commit([])
            if i:  # the first pass is the warm-up
                samples.setdefault(len(verified.drafted) + 1, []).append(elapsed_ms)
    return {rows: times for rows, times in samples.items() if len(times) >= repeats}
