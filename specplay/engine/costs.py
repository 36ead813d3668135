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
"""Tokens drafted per timed draft: a draft's first step may also catch the drafter's cache up."""


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
    includes_http: bool = False
    """Remote models: every time holds an HTTP round trip."""

    def cost_ratio(self, drafter: str) -> float:
        """c: a drafted token's time over a target step's."""
        return self.draft_step_ms[drafter].ms / self.target_step_ms.ms


@dataclass(frozen=True)
class RoundsMeasured:
    """What a drafter's own rounds measured, which a prediction takes before the timings above:
    acceptance by position, the drafter's time per drafted token in real rounds (catching its
    cache up on the tokens committed since included) and the host's work per round."""

    acceptance_per_position: list[float]
    """Kept over drafted at each position, over the rounds that drafted that far (the metric)."""
    drafted_share: list[float]
    """Of all rounds, those that drafted at least i tokens (1.0 throughout for a model drafter)."""
    kept_share: list[float]
    """Of all rounds, those that kept at least i drafted tokens."""
    draft_step_ms: float | None
    """None where the rounds drafted nothing."""
    host_ms: float

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
            draft_step_ms=(metrics.get("draft_ms") or 0.0) / drafted if drafted else None,
            host_ms=(metrics.get("overhead_ms") or 0.0) / rounds if rounds else 0.0,
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

    def predict(
        self, verify_ms: Mapping[int, float], draft_step_ms: float, target_step_ms: float, k_max: int
    ) -> list[KPrediction]:
        """`speedup.predict_by_k` from these rounds: what each k would give on their text."""
        return predict_by_k(
            self.kept_share,
            verify_ms,
            self.draft_step_ms if self.draft_step_ms is not None else draft_step_ms,
            target_step_ms,
            k_max,
            host_ms=self.host_ms,
            drafted_share=self.drafted_share,
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
    target_step = _target_step_ms(engine, prompt_token_ids, sampling, repeats=repeats, pipeline=pipeline)
    verify: dict[int, list[float]] = {}
    drafts: dict[str, list[float]] = {}
    for drafter in backend.drafters:
        generation = backend.open_generation(prompt_token_ids, prefill=(None, drafter))
        drafts[drafter] = _draft_step_ms(generation, drafter, sampling, repeats=repeats, draws=draws, clock=clock)
        if len(verify) < max_rows - 1:  # the curve from the first drafter that drafts every length asked
            verify = (
                _verify_curve(
                    generation, drafter, sampling, rule, max_rows=max_rows, repeats=repeats, draws=draws, clock=clock
                )
                | verify
            )
    if not verify:
        raise ConfigError("draft", "costs need a drafter to time the verify pass; name one with --draft")
    verify[1] = target_step  # one row, nothing drafted: a target step
    return RoundCosts(
        target_step_ms=Timing.of(target_step),
        verify_ms={rows: Timing.of(samples) for rows, samples in sorted(verify.items())},
        draft_step_ms={name: Timing.of(samples) for name, samples in drafts.items()},
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


def _draft_step_ms(
    generation: Generation, drafter: str, sampling: SamplingParams, *, repeats: int, draws: Draws, clock: Clock
) -> list[float]:
    samples = []
    for i in range(repeats + 1):
        start = clock()
        generation.draft(drafter, DRAFT_STEPS, sampling, draws.take(DRAFT_STEPS), None)
        elapsed_ms = 1000 * (clock() - start)
        generation.commit([])  # nothing kept: every cache back to the prompt
        if i:  # the first is the warm-up
            samples.append(elapsed_ms / DRAFT_STEPS)
    return samples


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
