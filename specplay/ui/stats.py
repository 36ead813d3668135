"""Live statistics of the two lanes, and the speedup Leviathan et al.'s formula predicts.

Pure functions over engine events (no Textual), so they are tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specplay.engine.events import DoneEvent, Event, RoundEvent, StepEvent
from specplay.engine.metrics import Metrics, predicted_speedup, round_cost_ratio

__all__ = ["Comparison", "LaneTally", "compare", "modelled", "predicted_speedup"]


@dataclass
class LaneTally:
    """One lane's counters, updated as its events arrive on the UI thread."""

    tokens: int = 0
    busy_s: float = 0.0
    """The lane's own time (its LaneClock): its turns on the model thread, prefill included."""
    steps: int = 0
    step_ms: float = 0.0
    spec: Metrics = field(default_factory=lambda: Metrics(speculative=True))
    """The engine's own round counters (acceptance, TV spent, draft time)."""
    finish_reason: str | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)
    """(busy_s, tokens so far) after each event that committed tokens: tokens/s over time."""
    final_metrics: dict[str, Any] = field(default_factory=dict)
    """The DoneEvent's metrics, once the run ends."""
    error_bound_total: float | None = None
    """When the backend knew only the top-K of a distribution: the sum of the judged positions'
    error bounds, a bound in TV on how far the whole output's distribution may be from the rule's."""

    def add(self, event: Event, busy_s: float) -> None:
        self.busy_s = busy_s
        if isinstance(event, RoundEvent):
            self.tokens += len(event.tokens)
            self.spec.add_round(event)
            bounds = [p.error_bound for p in event.positions if p.outcome != "unreached"]
            if any(bound is not None for bound in bounds):
                self.error_bound_total = (self.error_bound_total or 0.0) + sum(b or 0.0 for b in bounds)
        elif isinstance(event, StepEvent):
            self.steps += 1
            self.tokens += 1
            self.step_ms += event.step_ms
        elif isinstance(event, DoneEvent):
            self.finish_reason = event.finish_reason
            self.final_metrics = event.metrics
        if isinstance(event, RoundEvent | StepEvent):
            if not self.samples:
                self.samples.append((0.0, 0))
            self.samples.append((busy_s, self.tokens))

    @property
    def server(self) -> dict[str, Any] | None:
        """vLLM's native mode: the server's own account, from the run's end (exact where it says so)."""
        return self.final_metrics.get("server")

    def acceptance_per_position(self) -> list[float]:
        """From the rounds' judged positions; where the rounds carry none (vLLM's native mode), what
        the run's end reported (the server's per-position counters)."""
        own = self.spec.acceptance_per_position()
        return own or list(self.final_metrics.get("acceptance_per_position") or [])

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.busy_s if self.busy_s > 0 and self.tokens else None

    @property
    def rounds(self) -> int:
        return self.spec.num_spec_steps

    @property
    def drafted(self) -> int:
        return self.spec.num_draft_tokens

    @property
    def accepted(self) -> int:
        return self.spec.num_accepted_draft_tokens

    @property
    def judged(self) -> int:
        return self.spec.num_judged_draft_tokens

    @property
    def draft_ms(self) -> float:
        return self.spec.draft_ms

    @property
    def tv_spent(self) -> float:
        return self.spec.tv_spent

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.rounds if self.rounds else None

    @property
    def alpha(self) -> float | None:
        """Per-token acceptance estimate: accepted over judged positions. Leviathan's model accepts
        each drafted token independently with probability α, so a round's judged positions are
        Bernoulli trials and this is α's maximum-likelihood estimate. The draft acceptance rate
        (accepted / drafted) would count positions after a rejection, which were never tried."""
        return self.accepted / self.judged if self.judged else None

    @property
    def mean_k(self) -> float | None:
        return self.drafted / self.rounds if self.rounds else None

    @property
    def draft_ms_per_token(self) -> float | None:
        return self.draft_ms / self.drafted if self.drafted else None

    @property
    def mean_step_ms(self) -> float | None:
        return self.step_ms / self.steps if self.steps else None


@dataclass(frozen=True)
class Comparison:
    speedup: float | None
    """Measured: the speculative lane's tokens/s over the target-only lane's."""
    cost_ratio: float | None
    """c: draft_ms per drafted token over the target-only lane's mean step time."""
    predicted_speedup: float | None
    verify_steps: float | None = None
    """A round's verify pass, in target-only steps: Leviathan's formula takes it as 1."""
    host_steps: float | None = None
    """A round's host work (acceptance, rewinds, detokenizing), in target-only steps: the formula takes 0."""
    costed_speedup: float | None = None
    """The formula's expected tokens per round over the round's measured cost, k c + verify + host:
    where the prediction parts from the measurement, this says which term did it."""


def compare(speculative: LaneTally, target: LaneTally) -> Comparison:
    spec_tps, target_tps = speculative.tokens_per_s, target.tokens_per_s
    speedup = spec_tps / target_tps if spec_tps and target_tps else None
    per_token, step = speculative.draft_ms_per_token, target.mean_step_ms
    c = per_token / step if per_token is not None and step else None
    alpha, k = speculative.alpha, speculative.mean_k
    predicted = predicted_speedup(alpha, k, c) if alpha is not None and k is not None and c is not None else None
    if predicted is None or not step or not speculative.rounds:
        return Comparison(speedup, c, predicted)
    assert alpha is not None and k is not None and c is not None
    verify = speculative.spec.verify_ms / speculative.rounds / step
    host = speculative.spec.overhead_ms / speculative.rounds / step
    # predicted_speedup's round cost is k c + 1; scale it to k c + verify + host
    costed = predicted * (k * c + 1) / (k * c + verify + host)
    return Comparison(speedup, c, predicted, verify, host, costed)


def modelled(speculative: LaneTally) -> Comparison:
    """Remote servers: wall time is mostly HTTP round trips and server recomputes, so nothing is
    measured against target-only; the speedup is modelled from the measured acceptance and the
    lane's own draft and verify times."""
    spec = speculative.spec
    c = round_cost_ratio(spec.draft_ms, spec.num_draft_tokens, spec.verify_ms, spec.num_spec_steps)
    alpha, k = speculative.alpha, speculative.mean_k
    predicted = predicted_speedup(alpha, k, c) if alpha is not None and k is not None and c is not None else None
    return Comparison(None, c, predicted)
