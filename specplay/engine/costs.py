"""What a round costs where the user runs: the target's verify pass over n rows, for n = 1..max,
one target step, and each drafter's step. `speedup.predict_by_k` turns these into a speedup per k.

A verify pass is not "one target step": its time is a curve in the number of rows it scores, with
steps where kernels change (a row-wise kernel for a few rows, a matrix multiply for more). So it is
measured row count by row count, through the same Generation calls a round makes (a draft given
to `verify`, then a commit of nothing, which rewinds every cache), so what is timed is what a round
pays: the forward pass and the acceptance work after it. The draft is given, not drafted, so the
curve is timed at every row count whatever the drafters (prompt lookup drafts only what it finds).

Every prediction is a ratio to the target step, so the measurement is made of passes, each a
verify sweep and every drafter's draft between two short target-only runs, and each pass's times
are taken over the target step beside it: a machine whose speed changes while it measures (another
process loading it) moves both sides of each ratio alike. The passes' spread says when it moved
too much to choose a k (`disturbance`).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from specplay.engine.backend_protocol import Generation
from specplay.engine.disturbance import GROUP_STEPS, busy_reason, drift
from specplay.engine.draws import Draws, RoundDraws
from specplay.engine.events import RoundEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import Clock, SpecEngine
from specplay.engine.metrics import Metrics
from specplay.engine.request import Request
from specplay.engine.rules import AcceptanceRule
from specplay.engine.settings import PolicyParams, SamplingParams, SpecSettings
from specplay.engine.speedup import (
    KPrediction,
    TreePrediction,
    paying_k,
    predict_by_k,
    predict_tree,
    recommended_k,
)
from specplay.engine.tree import tree_shape
from specplay.errors import ConfigError

MAX_ROWS = PolicyParams().k_max + 1
"""The verify pass of the longest round the policies' default bound asks for (k_max drafts)."""
REPEATS = 9
"""Passes (timings per row count): on a busy machine fewer leave the median of each row count noisy."""
TARGET_STEPS = GROUP_STEPS
"""Target steps timed in each short target-only run between passes (after two untimed: the
prompt's and a warm-up); each run's median is one sample of the target step's drift, as a run's
groups of steps are (engine/disturbance.py)."""
CLEARLY_SLOWER = 0.1
"""A k predicted this much slower than the recommended one is clearly worse: where the passes'
spread cannot tell the two apart, the choice of k is noise."""
PARTS = 4
"""The stretches of its text a run measuring acceptance is cut into, in order, for the spread of
its acceptance (`RoundsMeasured.parts`)."""
TREE_WIDTHS = (2, 3, 4)
"""The tree widths `costs` predicts beside each chain."""
SHORT_DRAFT = 1
"""The draft length of the second, shorter run that measures a drafter's rounds: with the first's
(`costs`: the longest k predicted; the playground: the lane's k) it draws the drafter's cost as
rounds pay it (`with_short_rounds`)."""
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
    """Measured at one context length (the prompt's: `context_tokens`), on one machine."""

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
    passes: tuple[RoundCosts, ...] = ()
    """Each pass's own costs, one timing each, taken over the target step beside it and put back
    in ms at the median step (`target_step_ms`): a prediction from each says how far the passes
    alone move it (`predict_drafter`)."""
    target_runs_ms: tuple[float, ...] = ()
    """The target step of each short target-only run between passes (their median step): how much
    the machine's speed drifted while measuring."""
    draft_step_in_rounds_ms: dict[str, float] = field(default_factory=dict)
    """Each drafter's time per drafted token as real rounds of the prompt paid it, where measured
    (`measure_drafting`): on a loaded machine it can be half again the step timed alone."""
    context_tokens: int | None = None
    """The tokens every time was measured after (the prompt's, a conversation's earlier turns
    included): a verify pass costs more the longer its context."""

    def call_ms(self, drafter: str) -> float:
        """`drafter`'s time per draft call (0 where it was not measured apart)."""
        return self.draft_call_ms[drafter].ms if drafter in self.draft_call_ms else 0.0

    def step_for_rounds_ms(self, drafter: str) -> float:
        """`drafter`'s time per drafted token for a prediction from rounds (`RoundsMeasured.predict`):
        as real rounds paid it where measured, else as timed alone."""
        if drafter in self.draft_step_in_rounds_ms:
            return self.draft_step_in_rounds_ms[drafter]
        return self.draft_step_ms[drafter].ms

    def cost_ratio(self, drafter: str) -> float:
        """c: a drafted token's time over a target step's."""
        return self.draft_step_ms[drafter].ms / self.target_step_ms.ms

    def verify_curve_ms(self) -> dict[int, float]:
        """The verify pass's median by rows, what `predict_by_k` reads."""
        return {rows: t.ms for rows, t in self.verify_ms.items()}

    def target_drift(self) -> float:
        """The target step's quartile range over the runs between passes, over its median (0 with
        fewer than two runs)."""
        return drift(self.target_runs_ms)


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
    rounds: int = 0
    """How many rounds these are."""
    draft_line_ms: tuple[float, float] | None = None
    """(per drafted token, per round): the drafter's time as real rounds paid it, drawn through
    these rounds and shorter ones (`with_short_rounds`); None: `draft_costs` takes these rounds'
    drafting apart with the step timed alone."""
    parts: tuple[RoundsMeasured, ...] = ()
    """The same rounds cut into PARTS stretches of the text in order, each measured alone
    (`of_rounds` with parts): how far acceptance moves along the text, the spread of the
    acceptance a prediction takes as one number (`DrafterPrediction.by_part`)."""

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
            rounds=rounds,
        )

    @classmethod
    def of_rounds(cls, rounds: Iterable[RoundEvent], parts: int = 0) -> RoundsMeasured:
        """From rounds themselves (a session's, or a run's without those the engine cut short to
        end at max_tokens: leave those out, or they read as a drafter that drafts less); with
        `parts`, also each of that many stretches of them in order (where there are as many rounds)."""
        events = list(rounds)
        metrics = Metrics(speculative=True)
        for event in events:
            metrics.add_round(event)
        whole = cls.of(metrics.to_dict())
        if parts < 2 or len(events) < parts:
            return whole
        cuts = [len(events) * i // parts for i in range(parts + 1)]
        return replace(whole, parts=tuple(cls.of_rounds(events[a:b]) for a, b in itertools.pairwise(cuts)))

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens a round committed on average: its kept drafts and the one it ends with."""
        return 1 + sum(self.kept_share)

    def with_acceptance_of(self, other: RoundsMeasured) -> RoundsMeasured:
        """These rounds' times and costs with `other`'s acceptance (a part of them: `parts`)."""
        return replace(
            self,
            acceptance_per_position=other.acceptance_per_position,
            drafted_share=other.drafted_share,
            kept_share=other.kept_share,
            parts=(),
        )

    def scaled(self, factor: float) -> RoundsMeasured:
        """These rounds' times taken `factor` times (to the target step measured elsewhere, from
        the one measured beside them)."""
        line = self.draft_line_ms
        return replace(
            self,
            host_ms=self.host_ms * factor,
            draft_round_ms=self.draft_round_ms * factor,
            draft_line_ms=(line[0] * factor, line[1] * factor) if line is not None else None,
        )

    def with_short_rounds(self, short: RoundsMeasured) -> RoundsMeasured:
        """These rounds with the drafter's cost drawn as a line through their drafting time per
        round and that of `short`, rounds of the same prompt drafting fewer tokens: its slope is
        the time per drafted token, its intercept the time per round. Unchanged where the two
        drafted less than a token apart (prompt lookup finding little to copy) or the line falls.

        Why not the step timed alone: loaded, a drafted token cost the demo drafter 0.62 ms in a
        draft from the prompt's cache and 1.02-1.04 ms by this line through real rounds, after
        each verify pass (benchmarks/bench_costs.py); counted as the fixed part of a round, the
        difference charged a short draft in full."""
        spread = self.mean_drafted - short.mean_drafted
        if spread < 1.0:
            return self
        step_ms = (self.draft_round_ms - short.draft_round_ms) / spread
        if step_ms <= 0:
            return self
        call_ms = max(0.0, short.draft_round_ms - step_ms * short.mean_drafted)
        return replace(self, draft_line_ms=(step_ms, call_ms))

    def asked(self, k: int) -> RoundsMeasured:
        """These rounds as asked for k drafts each: positions no round reached were drafted by
        none (prompt lookup found nothing that long), not unmeasured, so their shares are 0."""
        pad = [0.0] * max(0, k - len(self.drafted_share))
        return replace(
            self,
            drafted_share=[*self.drafted_share, *pad],
            kept_share=[*self.kept_share, *pad],
            parts=tuple(part.asked(k) for part in self.parts),
        )

    def draft_costs(self, draft_step_ms: float, draft_call_ms: float = 0.0) -> tuple[float, float]:
        """(per drafted token, per round) in ms: these rounds' drafting time taken apart, the
        step given (timed alone, as the difference of two draft lengths, or as real rounds paid it:
        `RoundCosts.step_for_rounds_ms`) and the rest of a round's drafting its fixed part,
        whatever a real round adds to a draft call (the tokens committed since, work the last
        round left pending). The times given where the rounds drafted nothing; the rounds' own
        line where `with_short_rounds` drew one."""
        if self.draft_line_ms is not None:
            return self.draft_line_ms
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
        `draft_step_ms` and `draft_call_ms`: the drafter's times measured apart from these rounds
        (`draft_costs`)."""
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

    def predict_tree(
        self, chain: KPrediction, width: int, verify_ms: Mapping[int, float], target_step_ms: float
    ) -> TreePrediction | None:
        """`speedup.predict_tree` from these rounds, measured drafting trees of `width` and as many
        nodes as `chain` drafts (`measure_rounds` with a width)."""
        return predict_tree(
            chain,
            width=width,
            kept_share=self.kept_share,
            draft_round_ms=self.draft_round_ms,
            host_ms=self.host_ms,
            verify_ms=verify_ms,
            target_step_ms=target_step_ms,
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
    the prompt, on the engine's clock, in `repeats` passes after one untimed warm-up pass. A pass
    is a verify sweep (row counts up, the next pass down, so a drift within a pass spreads over
    all of them alike) and each drafter's two drafts, between two short target-only runs; its
    times are taken over the target step of those two runs. `pipeline`: as the target-only runs
    compared with (a playground's lanes take turns and do not pipeline)."""
    if max_rows < 2 or repeats < 1:
        raise ConfigError("max_rows", f"must be 2 or more and repeats 1 or more (got {max_rows}, {repeats})")
    backend, clock, draws = engine.backend, engine.clock, Draws(seed=0)
    tokens = _continuation(engine, prompt_token_ids, max_rows - 1)
    verifying = backend.open_generation(prompt_token_ids, prefill=(None,))
    # Drafting touches only the drafter's cache (or prompt lookup's index): the target's is not built.
    drafting = {d: backend.open_generation(prompt_token_ids, prefill=(d,)) for d in backend.drafters}
    order = list(range(2, max_rows + 1))

    def one_pass(upward: bool) -> _Pass:
        verify = {
            rows: _verify_ms(verifying, tokens[: rows - 1], sampling, rule, draws=draws, clock=clock)
            for rows in (order if upward else order[::-1])
        }
        drafts = {d: _draft_ms(g, d, sampling, draws=draws, clock=clock) for d, g in drafting.items()}
        return _Pass(verify, drafts)

    one_pass(upward=False)  # the warm-up
    runs = [_target_steps_ms(engine, prompt_token_ids, sampling, pipeline=pipeline)]
    timed = []
    for i in range(repeats):
        timed.append(one_pass(upward=i % 2 == 0))
        runs.append(_target_steps_ms(engine, prompt_token_ids, sampling, pipeline=pipeline))
    target_step = Timing.of([s for run in runs for s in run])
    # Each pass in target steps of the runs on either side of it, put back in ms at the median step.
    passes = [
        p.at(target_step.ms, statistics.median([*before, *after]))
        for p, before, after in zip(timed, runs, runs[1:], strict=False)
    ]
    return RoundCosts(
        target_step_ms=target_step,
        verify_ms={1: target_step} | _pooled([{n: p.verify_ms[n].ms for n in order} for p in passes]),
        draft_step_ms=_pooled([{d: t.ms for d, t in p.draft_step_ms.items()} for p in passes]),
        draft_call_ms=_pooled([{d: t.ms for d, t in p.draft_call_ms.items()} for p in passes]),
        includes_http=not backend.capabilities.wall_time_is_speed,
        passes=tuple(passes),
        target_runs_ms=tuple(statistics.median(run) for run in runs),
        context_tokens=len(prompt_token_ids),
    )


@dataclass(frozen=True)
class _Pass:
    """One pass's raw times: the verify pass by rows, each drafter's (step, call)."""

    verify_ms: dict[int, float]
    drafts_ms: dict[str, tuple[float, float]]

    def at(self, step_ms: float, beside_ms: float) -> RoundCosts:
        """This pass's times over `beside_ms` (the target step measured beside it), at `step_ms`."""
        scale = step_ms / beside_ms if beside_ms > 0 else 1.0
        one = Timing(step_ms, 0.0)
        return RoundCosts(
            target_step_ms=one,
            verify_ms={1: one} | {n: Timing(ms * scale, 0.0) for n, ms in sorted(self.verify_ms.items())},
            draft_step_ms={d: Timing(step * scale, 0.0) for d, (step, _) in self.drafts_ms.items()},
            draft_call_ms={d: Timing(call * scale, 0.0) for d, (_, call) in self.drafts_ms.items()},
        )


def _pooled(samples: Sequence[Mapping[Any, float]]) -> dict[Any, Timing]:
    """Per key, the Timing of its samples over the passes."""
    return {key: Timing.of([s[key] for s in samples]) for key in samples[0]} if samples else {}


def _continuation(engine: SpecEngine, prompt: Sequence[int], n: int) -> list[int]:
    """The target's own greedy continuation of the prompt, n tokens: the draft every verify pass is
    given. A draft the target would keep is what a round worth speculating verifies (a rejected
    draft scores the same rows on MLX, but a remote server's sampled verify asks again for tokens
    outside its top logprobs, which a drafter's rejected tokens often are and its kept ones rarely);
    greedy, whatever the run's sampling, so the draft is the same at every temperature and seed."""
    generation = engine.backend.open_generation(prompt, prefill=(None,))
    stream = generation.generate(None, SamplingParams(), lambda: 0.0, False)
    try:
        return [next(stream) for _ in range(n)]
    finally:
        stream.close()


def _target_steps_ms(
    engine: SpecEngine, prompt: Sequence[int], sampling: SamplingParams, *, pipeline: bool
) -> list[float]:
    """A short target-only run's steps after its first two (the prompt's and a warm-up), as the
    engine times them (the time between one token and the next, host work included): the
    target-only side of every measured speedup."""
    request = Request("", tuple(prompt), "target", 0, TARGET_STEPS + 2, ignore_eos=True, pipeline=pipeline)
    controls = LiveControls(SpecSettings(sampling=sampling), ())
    steps = [e.step_ms for e in engine.generate(request, controls) if isinstance(e, StepEvent)]
    return steps[2:]


def _verify_ms(
    generation: Generation,
    tokens: Sequence[int],
    sampling: SamplingParams,
    rule: AcceptanceRule,
    *,
    draws: Draws,
    clock: Clock,
) -> float:
    """One verify pass over len(tokens) + 1 rows, given `tokens` as the draft; nothing committed."""
    round_draws = RoundDraws.take(draws, len(tokens))
    draft = generation.given_draft(tokens)
    start = clock()
    generation.verify(draft, sampling, rule, round_draws)
    elapsed_ms = 1000 * (clock() - start)
    generation.commit([])  # every cache back at the prompt
    return elapsed_ms


def _draft_ms(
    generation: Generation, drafter: str, sampling: SamplingParams, *, draws: Draws, clock: Clock
) -> tuple[float, float]:
    """(time per drafted token, time per call): a draft of one token and one of DRAFT_STEPS
    tokens, timed in turn; the difference is the steps', the rest the call's."""

    def timed(k: int) -> float:
        start = clock()
        generation.draft(drafter, tree_shape(1, 0, k), sampling, draws.take(k), None)
        elapsed_ms = 1000 * (clock() - start)
        generation.commit([])  # nothing kept: every cache back to the prompt
        return elapsed_ms

    one, longer = timed(1), timed(DRAFT_STEPS)
    step = max(0.0, (longer - one) / (DRAFT_STEPS - 1))
    return step, max(0.0, one - step)


def measure_rounds(
    engine: SpecEngine,
    prompt_token_ids: Sequence[int],
    settings: SpecSettings,
    drafter: str,
    *,
    k: int,
    max_tokens: int,
    seed: int = 0,
    ignore_eos: bool = False,
    target_step_ms: float | None = None,
    pipeline: bool = True,
    width: int = 1,
) -> RoundsMeasured:
    """Acceptance by position and the rounds' times on a short run of the prompt at a fixed k,
    routed to `drafter` (with a `width` above 1: trees of k nodes, their acceptance by depth). With
    `target_step_ms` (`RoundCosts.target_step_ms`), its times are taken over the target step of
    short target-only runs before and after it and put back in ms at that step, as each pass of
    `measure_costs` is: a run in a slow phase of the machine would otherwise charge every round a
    slow drafter and host."""
    tree = {"width": width, "tree_nodes": k} if width > 1 else {"width": 1, "tree_nodes": 0}
    routed = settings.changed(k=k, policy="fixed", route=drafter, counterfactual=False, **tree)
    request = Request(
        "", tuple(prompt_token_ids), "speculative", seed, max_tokens, ignore_eos=ignore_eos, pipeline=pipeline
    )
    sampling = settings.sampling
    before = _target_steps_ms(engine, prompt_token_ids, sampling, pipeline=pipeline) if target_step_ms else []
    events = engine.generate(request, LiveControls(routed, engine.drafters))
    # Rounds near the end draft less to stop at max_tokens: not the drafter's doing, left out.
    whole = (e for e in events if isinstance(e, RoundEvent) and e.token_index + k <= max_tokens)
    rounds = RoundsMeasured.of_rounds(whole, parts=PARTS)
    if target_step_ms:
        after = _target_steps_ms(engine, prompt_token_ids, sampling, pipeline=pipeline)
        rounds = rounds.scaled(target_step_ms / statistics.median([*before, *after]))
    return rounds.asked(k)


def measure_drafter(
    engine: SpecEngine,
    prompt_token_ids: Sequence[int],
    settings: SpecSettings,
    drafter: str,
    *,
    k: int,
    max_tokens: int,
    seed: int = 0,
    ignore_eos: bool = False,
    target_step_ms: float | None = None,
    pipeline: bool = True,
) -> RoundsMeasured:
    """A drafter's chain rounds for a prediction: `measure_rounds` at k (acceptance by position,
    host work), and at SHORT_DRAFT over half as many tokens, which draws its cost per drafted token
    and per round as the rounds paid them (`RoundsMeasured.with_short_rounds`)."""

    rounds_at = partial(
        measure_rounds,
        engine,
        prompt_token_ids,
        settings,
        drafter,
        seed=seed,
        ignore_eos=ignore_eos,
        target_step_ms=target_step_ms,
        pipeline=pipeline,
    )
    rounds = rounds_at(k=k, max_tokens=max_tokens)
    if k <= SHORT_DRAFT:
        return rounds
    return rounds.with_short_rounds(rounds_at(k=SHORT_DRAFT, max_tokens=max(2, max_tokens // 2)))


def measure_drafting(
    engine: SpecEngine,
    prompt_token_ids: Sequence[int],
    settings: SpecSettings,
    drafters: Iterable[str],
    *,
    k: int,
    max_tokens: int,
    target_step_ms: float,
    pipeline: bool = True,
) -> dict[str, float]:
    """Each of `drafters`' time per drafted token as real rounds of the prompt paid it: the slope of
    `measure_drafter`'s line through rounds at k and at SHORT_DRAFT, for
    `RoundCosts.draft_step_in_rounds_ms`. Names that are no drafter (the route none) and drafters
    whose rounds drew no line (prompt lookup finding little to copy) are left out."""
    lines = {
        drafter: measure_drafter(
            engine,
            prompt_token_ids,
            settings,
            drafter,
            k=k,
            max_tokens=max_tokens,
            target_step_ms=target_step_ms,
            pipeline=pipeline,
        ).draft_line_ms
        for drafter in dict.fromkeys(drafters)
        if drafter in engine.drafters
    }
    return {drafter: line[0] for drafter, line in lines.items() if line is not None}


# --- a drafter's prediction, and whether the measurement can choose a k --------------------------


@dataclass(frozen=True)
class DrafterPrediction:
    """What a drafter is predicted to give at each k, from the pooled costs and from each pass's."""

    by_k: list[KPrediction]
    """From the median costs: what is shown and recommended."""
    by_pass: list[list[KPrediction]]
    """From each pass's costs alone (the same acceptance and host work)."""
    by_part: list[list[KPrediction]] = field(default_factory=list)
    """From the pooled costs and each part's acceptance alone (`RoundsMeasured.parts`): the spread
    that acceptance along the text gives the prediction."""
    drafter: str = ""
    """Whose prediction this is, for the sentences that name it."""

    @property
    def best(self) -> KPrediction | None:
        """The fastest k predicted, whether or not it pays."""
        return recommended_k(self.by_k)

    @property
    def paying(self) -> KPrediction | None:
        """The k to set: the fastest, where it is predicted faster than the target alone."""
        return paying_k(self.by_k)

    def part_speedups(self, k: int) -> list[float]:
        """k's predicted speedup from each part's acceptance (empty: no parts measured)."""
        return [p.speedup for predictions in self.by_part for p in predictions if p.k == k]

    def speedup_range(self, k: int) -> tuple[float, float] | None:
        """The quartiles of k's predicted speedup over the passes (None: not predicted)."""
        samples = [p.speedup for predictions in self.by_pass for p in predictions if p.k == k]
        if not samples:
            return None
        if len(samples) < 2:
            return samples[0], samples[0]
        low, _, high = statistics.quantiles(samples, n=4, method="inclusive")
        return low, high


def predict_drafter(costs: RoundCosts, drafter: str, rounds: RoundsMeasured, k_max: int) -> DrafterPrediction:
    """`RoundsMeasured.predict` from the costs measured for `drafter`, pooled and pass by pass."""

    def of(c: RoundCosts) -> list[KPrediction]:
        step, call = c.draft_step_ms[drafter].ms, c.call_ms(drafter)
        return rounds.predict(c.verify_curve_ms(), step, c.target_step_ms.ms, k_max, draft_call_ms=call)

    def of_part(part: RoundsMeasured) -> list[KPrediction]:
        step, call = costs.draft_step_ms[drafter].ms, costs.call_ms(drafter)
        verify = costs.verify_curve_ms()
        return rounds.with_acceptance_of(part).predict(verify, step, costs.target_step_ms.ms, k_max, draft_call_ms=call)

    parts = [of_part(part) for part in rounds.parts]
    return DrafterPrediction(of(costs), [of(p) for p in costs.passes], parts, drafter=drafter)


def disturbance(costs: RoundCosts, predictions: Iterable[DrafterPrediction]) -> str | None:
    """Why these measurements cannot choose a k, or None where they can: the machine's speed moved
    while measuring (the target step's quartile range over its runs, relative), or a drafter's
    recommended k cannot be told from a clearly slower k by the passes' quartiles alone."""
    if (busy := busy_reason(costs.target_drift(), "the target step")) is not None:
        return busy
    for prediction in predictions:
        best = prediction.best
        best_range = prediction.speedup_range(best.k) if best is not None else None
        if best is None or best_range is None:
            continue
        for p in prediction.by_k:
            p_range = prediction.speedup_range(p.k)
            if p.speedup <= (1 - CLEARLY_SLOWER) * best.speedup and p_range is not None and p_range[1] >= best_range[0]:
                whose = f"{prediction.drafter}'s " if prediction.drafter else ""
                return (
                    f"{whose}k {p.k}, predicted {p.speedup / best.speedup - 1:.0%} from its fastest k {best.k}, "
                    "is inside its spread over the passes: the machine is too noisy to choose k"
                )
    return None
