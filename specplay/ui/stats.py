"""Live statistics of the lanes, and the speedup they measure and predict.

Pure functions over engine events (no Textual), so they are tested on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specplay.engine.costs import RoundCosts, RoundsMeasured
from specplay.engine.disturbance import turns_disturbance
from specplay.engine.events import ControlEvent, DoneEvent, Event, RoundEvent, StartEvent, StepEvent, TokenSource
from specplay.engine.metrics import Metrics
from specplay.engine.settings import SpecSettings
from specplay.engine.speedup import (
    KPrediction,
    Prediction,
    RoundAccount,
    alpha,
    draft_acceptance_rate,
    mean_acceptance_length,
    mean_step_ms,
    measured_speedup,
    predict,
    predict_modelled,
    recommended_k,
    round_account,
    who_drafted,
)
from specplay.store.changes import settings_after


@dataclass
class LaneTally:
    """One lane's counters, updated as its events arrive on the UI thread."""

    tokens: int = 0
    busy_s: float = 0.0
    """The lane's own time (its LaneClock): its turns on the model thread, prefill included."""
    counters: Metrics = field(default_factory=lambda: Metrics(speculative=True))
    """The engine's own counters (acceptance, TV spent, draft time; tokens on the lane's clock)."""
    finish_reason: str | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)
    """(busy_s, tokens so far) after each event that committed tokens, from the first token on:
    tokens/s over time."""
    final_metrics: dict[str, Any] = field(default_factory=dict)
    """The DoneEvent's metrics, once the run ends."""
    temperature: float = 0.0
    """The sampling temperature in force (from the start settings and live changes)."""
    rule: str = ""
    """The acceptance rule in force, described (from the start settings and live changes)."""
    settings: SpecSettings | None = None
    last_round: RoundEvent | None = None
    """The latest round: its route and k are the ones in use."""
    drafted_by: dict[str, int] = field(default_factory=dict)
    """Tokens drafted (a tree's nodes) by each drafter that served a round, `none`'s 0 among them."""
    error_bound_total: float | None = None
    """When the backend knew only the top-K of a distribution: the sum of the judged positions'
    error bounds, a bound in TV on how far the whole output's distribution may be from the rule's."""

    def add(self, event: Event, busy_s: float) -> None:
        if isinstance(event, StartEvent):
            self._settle(event.settings)
            # The lane's clock starts at 0 with the lane, before its prefill, as the engine's own
            # start does (its StartEvent comes after the prefill): one time to the first token,
            # the same while the lane runs and in its session.
            self.counters.start_s = 0.0
        elif isinstance(event, ControlEvent) and self.settings is not None:
            # A reopened session's changes may hold what these settings do not take: those are skipped.
            self._settle(settings_after(self.settings, event).settings)
        elif isinstance(event, RoundEvent):
            self.last_round = event
            self.drafted_by[event.drafter] = self.drafted_by.get(event.drafter, 0) + event.nodes
            self.tokens += len(event.tokens)
            self.counters.add_round(event)
            bounds = [p.error_bound for p in event.positions if p.outcome != "unreached"]
            if any(bound is not None for bound in bounds):
                self.error_bound_total = (self.error_bound_total or 0.0) + sum(b or 0.0 for b in bounds)
        elif isinstance(event, StepEvent):
            self.tokens += 1
            self.counters.add_step(event)
        elif isinstance(event, DoneEvent):
            self.finish_reason = event.finish_reason
            self.final_metrics = event.metrics
        # Counterfactual routes' time is not the lane's own: it leaves the lane's tokens/s alone.
        self.busy_s = busy_s - self.counters.counterfactual_ms / 1000
        sources = _sources(event)
        if sources:
            # Timed on the lane's clock as the engine times its own metrics: the speed shown while
            # the lane runs is the one its session records.
            self.counters.add_tokens(sources, self.busy_s)
            self.samples.append((self.busy_s, self.tokens))

    def _settle(self, settings: SpecSettings) -> None:
        self.settings = settings
        self.temperature = settings.sampling.temperature
        rule = settings.acceptance_rule
        self.rule = rule.named()

    @property
    def drafting(self) -> str:
        """Who drafted the lane's drafts, in words (`speedup.who_drafted`)."""
        return who_drafted(self.drafted_by, self.last_round.drafter if self.last_round is not None else None)

    @property
    def metrics(self) -> dict[str, Any]:
        """The lane's metrics: as the run's end recorded them once it has ended, its counters' so far
        before (the same counts: the engine's own Metrics over the same events)."""
        return self.final_metrics or self.counters.to_dict()

    @property
    def server(self) -> dict[str, Any] | None:
        """vLLM's native mode: the server's own account, from the run's end (exact where it says so)."""
        return self.final_metrics.get("server")

    def acceptance_per_position(self) -> list[float]:
        """From the rounds' judged positions; where the rounds carry none (vLLM's native mode), what
        the run's end reported (the server's per-position counters)."""
        own = self.counters.acceptance_per_position()
        return own or list(self.final_metrics.get("acceptance_per_position") or [])

    @property
    def tokens_per_s(self) -> float | None:
        """The engine's one definition (tokens after the first delivery over the time since it,
        `Metrics.tokens_per_s`): what the run's end records once it has ended, the same count on
        the lane's clock before."""
        if "tokens_per_s" in self.final_metrics:
            return self.final_metrics["tokens_per_s"]
        return self.counters.tokens_per_s

    @property
    def time_to_first_token_s(self) -> float | None:
        """From the lane's start (prefill included) to its first token, on the lane's clock: apart
        from tokens/s, as the engine records it."""
        if (recorded := self.final_metrics.get("time_to_first_token_ms")) is not None:
            return recorded / 1000
        if self.counters.first_token_s is None or self.counters.start_s is None:
            return None
        return self.counters.first_token_s - self.counters.start_s

    @property
    def rounds(self) -> int:
        return self.counters.num_spec_steps

    @property
    def drafted(self) -> int:
        return self.counters.num_draft_tokens

    @property
    def accepted(self) -> int:
        return self.counters.num_accepted_draft_tokens

    @property
    def judged(self) -> int:
        return self.counters.num_judged_draft_tokens

    @property
    def draft_ms(self) -> float:
        return self.counters.draft_ms

    @property
    def tv_spent(self) -> float:
        return self.counters.tv_spent

    @property
    def tv_spent_per_position(self) -> float | None:
        """The TV the rule spent, on average, at a judged position: what D bounds at each one."""
        judged = self.counters.num_judged_draft_tokens
        return self.counters.tv_spent / judged if judged else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        return draft_acceptance_rate(self.accepted, self.drafted)

    @property
    def mean_acceptance_length(self) -> float | None:
        return mean_acceptance_length(self.accepted, self.rounds)

    @property
    def alpha(self) -> float | None:
        return alpha(self.accepted, self.judged)

    @property
    def mean_step_ms(self) -> float | None:
        """A target-only step after the first token's, as the engine's yardstick counts it."""
        return mean_step_ms(self.counters.step_ms, self.counters.num_steps)


@dataclass(frozen=True)
class ConversationFigures:
    """One lane over every turn of a conversation."""

    turns: int
    tokens: int
    tokens_per_s: float | None
    """Every turn's tokens after its first delivery over the time they took: each turn's tokens/s,
    as its lane shows it, weighed by those tokens (a turn's first token is its prefill's)."""
    draft_acceptance_rate: float | None
    mean_acceptance_length: float | None


def conversation_figures(tallies: Sequence[LaneTally]) -> ConversationFigures:
    """A lane's turns, each a tally, as one conversation."""
    decoded, seconds = 0, 0.0
    for tally in tallies:
        tokens = tally.counters.num_tokens - tally.counters.num_first_tokens
        if tokens and tally.tokens_per_s:
            decoded += tokens
            seconds += tokens / tally.tokens_per_s
    accepted = sum(tally.accepted for tally in tallies)
    return ConversationFigures(
        turns=len(tallies),
        tokens=sum(tally.tokens for tally in tallies),
        tokens_per_s=decoded / seconds if seconds > 0 else None,
        draft_acceptance_rate=draft_acceptance_rate(accepted, sum(tally.drafted for tally in tallies)),
        mean_acceptance_length=mean_acceptance_length(accepted, sum(tally.rounds for tally in tallies)),
    )


@dataclass(frozen=True)
class Comparison:
    speedup: float | None
    """Measured: the speculative lane's tokens/s over the target-only lane's (None where wall time
    is not a speed, or no target-only lane ran)."""
    prediction: Prediction
    account: RoundAccount | None = None
    """The measured speedup taken apart, a mean round in target steps (local lanes only)."""
    by_k: list[KPrediction] = field(default_factory=list)
    """With measured round costs: the speedup each k would give on this lane's acceptance so far."""
    k_in_use: int | None = None
    """The k set (a fixed policy) or the rounds' mean k (an adaptive one)."""
    disturbed: str | None = None
    """Why the measured speedup is disturbed (`disturbance`): the machine's speed moved while the
    lanes ran; None where it did not, or no speedup was measured."""


def compare(speculative: LaneTally, target: LaneTally | None, costs: RoundCosts | None = None) -> Comparison:
    """`target`: the target-only lane run beside it, when its wall time is a speed; None models the
    prediction from the speculative lane's own times alone (remote servers). With `costs`, each k's
    predicted speedup from the lane's acceptance by position and the drafter in use."""
    metrics = speculative.counters.to_dict()
    if target is None:
        return Comparison(None, predict_modelled(metrics))
    speedup = measured_speedup(speculative.tokens_per_s, target.tokens_per_s)
    disturbed = disturbance([speculative], [target]) if speedup is not None else None
    prediction, account = predict(metrics, target.mean_step_ms), round_account(metrics, target.mean_step_ms)
    comparison = Comparison(speedup, prediction, account, disturbed=disturbed)
    last = speculative.last_round
    if costs is None or last is None or last.drafter not in costs.draft_step_ms:
        return comparison
    verify = {rows: t.ms for rows, t in costs.verify_ms.items()}
    # The target step, the drafter's time per round and the host's work per round as this run
    # measured them; the verify curve and a drafted token's cost in rounds from the costs.
    rounds = RoundsMeasured.of(metrics)
    target_step_ms = target.mean_step_ms or costs.target_step_ms.ms
    step_ms, call_ms = costs.step_for_rounds_ms(last.drafter), costs.call_ms(last.drafter)
    by_k = rounds.predict(verify, step_ms, target_step_ms, k_max=max(verify) - 1, draft_call_ms=call_ms)
    settings, mean_k = speculative.settings, comparison.prediction.mean_k
    # The k set, under a fixed policy (the last rounds may be cut short to fit max_tokens); an
    # adaptive policy's k moves, and its mean says where it has been.
    k = settings.k if settings is not None and settings.policy == "fixed" else round(mean_k) if mean_k else None
    return replace(comparison, by_k=by_k, k_in_use=k)


def disturbance(speculative: Sequence[LaneTally], target: Sequence[LaneTally]) -> str | None:
    """Why a speedup measured between speculative lanes and the target-only lanes beside them (a
    conversation's turns, in order) is disturbed, by the one definition `specplay run` and
    `specplay sessions` use (`speedup_disturbance`): each turn's where its lanes' timings drifted,
    named by its number where there are several; None where none did."""
    pairs = enumerate(zip(speculative, target, strict=True), 1)
    turns = ((turn, lane.metrics, baseline.metrics) for turn, (lane, baseline) in pairs)
    return turns_disturbance(turns, named=len(speculative) > 1)


def _sources(event: Event) -> list[TokenSource]:
    """Where each token an event commits came from."""
    if isinstance(event, RoundEvent):
        return [token.source for token in event.tokens]
    if isinstance(event, StepEvent):
        return [event.token.source]
    return []


def k_advice(comparison: Comparison) -> str | None:
    """One line from measured round costs: what the k in use is predicted to give, and a better k
    where there is one ("k 4 → 1.05×; k 6 would give 1.21×")."""
    if not comparison.by_k or comparison.k_in_use is None:
        return None
    best = recommended_k(comparison.by_k)
    now = next((p for p in comparison.by_k if p.k == comparison.k_in_use), None)
    assert best is not None
    if now is None:
        return f"k {comparison.k_in_use}: beyond the measured costs; k {best.k} would give {best.speedup:.2f}×"
    if best.k == now.k or best.speedup <= now.speedup:
        return f"k {now.k} → {now.speedup:.2f}× predicted from the measured costs: the best k here"
    return f"k {now.k} → {now.speedup:.2f}×; k {best.k} would give {best.speedup:.2f}× (from the measured costs)"


def verify_steps(costs: RoundCosts) -> str:
    """The measured verify pass at a few row counts, in target steps, for the status line."""
    steps = ", ".join(
        f"{rows} rows {t.ms / costs.target_step_ms.ms:.2f}" for rows, t in costs.verify_ms.items() if rows in (2, 5, 9)
    )
    return f"verify in target steps: {steps}"
