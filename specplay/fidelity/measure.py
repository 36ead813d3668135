"""Fidelity: what speculative decoding with a relaxed acceptance rule gives up for its speed.

For each row (target-only, draft-only, one per rule and knob value: D = 0.5, lenience λ = 2...)
the same seeds are sampled and the
outputs are judged against the target: their log-likelihood under it, their diversity, and how
close they are to the target-only samples. Generating and scoring come in as callables, so this
module knows no model library and no UI; it runs wherever those callables run.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rapidfuzz.distance import Levenshtein

from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.rules import RULES, AcceptanceRule, Mentored, RuleParams, make_rule
from specplay.engine.settings import Mode, SpecSettings
from specplay.engine.speedup import draft_acceptance_rate, mean_acceptance_length
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError, SpecplayError
from specplay.files.json_text import dump_json
from specplay.files.outputs import free_path, write_output
from specplay.store.format import LaneRecord

DEFAULT_BUDGETS = Mentored.knob.sweep
DEFAULT_KNOBS: dict[str, tuple[float, ...]] = {name: rule.knob.sweep for name, rule in RULES.items()}
"""Each rule's knob values a sweep tries when none are given: from nearly lossless to loose."""
TARGET_ROW, DRAFT_ROW = "target-only", "draft-only"


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished generation, as the report needs it."""

    seed: int
    token_ids: tuple[int, ...]
    """Generated tokens, without the EOS that ended the run."""
    finish_reason: str
    metrics: Mapping[str, Any]
    """The engine's metrics (tokens_per_s, tv_spent, num_draft_tokens...)."""
    route: str | None = None
    lane: LaneRecord | None = field(default=None, compare=False)
    """Every event of the run, for a review page of the sweep."""


Generate = Callable[[Mode, AcceptanceRule | None, int], Sample]
"""(mode, acceptance rule, seed) -> one sample; the rule is None outside speculative mode."""
Score = Callable[[Sequence[int]], Sequence[float]]
"""Generated token ids -> the target's log-probability (temperature 1) of each."""


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What a row of the table samples: its label, the mode, the rule (speculative rows)."""

    label: str
    mode: Mode
    rule: AcceptanceRule | None = None


@dataclass(frozen=True, slots=True)
class ScoredSample:
    seed: int
    token_ids: list[int]
    finish_reason: str
    tokens_per_s: float | None
    log_likelihood_per_token: float | None
    """None for an empty output: it has no tokens to average over."""
    similarity_to_target: float | None


@dataclass(frozen=True, slots=True)
class FidelityRow:
    label: str
    mode: Mode
    tv_budget: float | None
    """Mentored decoding's D (None in other rows)."""
    num_samples: int
    draft_acceptance_rate: float | None
    mean_acceptance_length: float | None
    tokens_per_s: float | None
    """Median over the samples: robust to the first run's warm-up."""
    log_likelihood_per_token: float | None
    """Mean over samples of each sample's mean log-probability per token under the target."""
    log_likelihood_se: float | None
    """Standard error of that mean, from the spread of the per-sample values."""
    distinct_1: float | None
    distinct_2: float | None
    mean_length: float
    similarity_to_target: float | None
    tv_spent_per_token: float | None
    samples: list[ScoredSample] = field(default_factory=list)
    rule: str | None = None
    """The acceptance rule of a speculative row."""
    knob: float | None = None
    """Its knob's value (D, epsilon, lambda, alpha: the rule's `knob`)."""


@dataclass(frozen=True, slots=True)
class FidelityReport:
    seeds: list[int]
    budgets: list[float]
    """Mentored decoding's TV budgets among the rows."""
    route: str | None
    """The drafter of the draft-only and speculative rows."""
    rows: list[FidelityRow]
    lanes: dict[int, dict[str, LaneRecord]] = field(default_factory=dict, compare=False)
    """Per seed, per row label: the run's events, where the generator kept them (not in to_dict)."""

    def row(self, label: str) -> FidelityRow | None:
        return next((r for r in self.rows if r.label == label), None)

    @property
    def speculative_rows(self) -> list[FidelityRow]:
        return [r for r in self.rows if r.mode == "speculative"]

    def rows_of(self, rule: str) -> list[FidelityRow]:
        return [r for r in self.speculative_rows if r.rule == rule]

    @property
    def rules(self) -> list[str]:
        return list(dict.fromkeys(r.rule for r in self.speculative_rows if r.rule is not None))

    def matched(self) -> list[FidelityRow]:
        """One row per rule at about the same mean acceptance length: each rule's row nearest the
        highest length every rule reaches. Acceptance sets the speed at a given k and cost, so
        these are the matched-speed points whose texts a reader compares."""
        curves = [[r for r in self.rows_of(rule) if r.mean_acceptance_length is not None] for rule in self.rules]
        curves = [curve for curve in curves if curve]
        if not curves:
            return []
        reach = min(max(r.mean_acceptance_length or 0.0 for r in curve) for curve in curves)
        return [min(curve, key=lambda r: abs((r.mean_acceptance_length or 0.0) - reach)) for curve in curves]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, lanes={}))  # the events stay out of the report file
        del out["lanes"]
        out["rules"] = {rule: [r.knob for r in self.rows_of(rule)] for rule in self.rules}
        out["matched"] = [r.label for r in self.matched()] if len(self.rules) > 1 else []
        return out


# Statistics: pure functions on token id lists and numbers.


def ngrams(token_ids: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(token_ids[i : i + n]) for i in range(len(token_ids) - n + 1)]


def distinct_n(samples: Iterable[Sequence[int]], n: int) -> float | None:
    """Unique n-grams over total n-grams, pooled over the samples (n-grams never span two samples)."""
    every = [gram for sample in samples for gram in ngrams(sample, n)]
    return len(set(every)) / len(every) if every else None


def similarities(
    samples: Sequence[Sequence[int]], references: Sequence[Sequence[int]], leave_one_out: bool = False
) -> list[float | None]:
    """For each sample, its mean normalized Levenshtein similarity to the references.

    `leave_one_out` skips the reference at the sample's own index: comparing the reference set
    with itself would otherwise count each sample's perfect match with itself.
    """
    out: list[float | None] = []
    for i, sample in enumerate(samples):
        others = [ref for j, ref in enumerate(references) if not (leave_one_out and j == i)]
        values = [Levenshtein.normalized_similarity(sample, ref) for ref in others]
        out.append(statistics.fmean(values) if values else None)
    return out


def mean_and_se(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """Mean of the known values and its standard error (None below two values)."""
    known = [v for v in values if v is not None]
    if not known:
        return None, None
    mean = statistics.fmean(known)
    se = statistics.stdev(known) / len(known) ** 0.5 if len(known) > 1 else None
    return mean, se


def median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _total(samples: Sequence[Sample], metric: str) -> float:
    return sum(s.metrics.get(metric) or 0 for s in samples)


# The measurement.


def check_budgets(budgets: Sequence[float]) -> list[float]:
    """Sorted, without repeats; each in [0, 1]."""
    if not budgets:
        raise ConfigError("budgets", "needs at least one TV budget in [0, 1]")
    for budget in budgets:
        if not 0 <= budget <= 1:
            raise ConfigError("budgets", f"must each be in [0, 1] (got {budget:g})")
    return sorted(set(budgets))


def sweep_rules(knobs: Mapping[str, Sequence[float]], params: RuleParams | None = None) -> list[AcceptanceRule]:
    """One rule per knob value, in the order given, the other settings from `params`; a value out
    of its rule's range raises the ConfigError that names it."""
    params = params or RuleParams()
    return [
        make_rule(name, replace(params, **{RULES[name].knob.setting.field: value}))
        for name, values in knobs.items()
        for value in values
    ]


def row_plans(rules: Sequence[AcceptanceRule], draft_row: bool = True) -> list[RowPlan]:
    """`draft_row`: the drafter can write alone (prompt lookup cannot: it only copies)."""
    return [
        RowPlan(TARGET_ROW, "target"),
        *([RowPlan(DRAFT_ROW, "draft")] if draft_row else []),
        *(RowPlan(rule.row_label(), "speculative", rule) for rule in dict.fromkeys(rules)),
    ]


def measure_fidelity(
    generate: Generate,
    score: Score,
    rules: Sequence[AcceptanceRule] | None = None,
    seeds: Sequence[int] = range(8),
    on_sample: Callable[[int, int], None] | None = None,
    draft_row: bool = True,
) -> FidelityReport:
    """Sample every row with every seed, score each output under the target, and summarise.
    `rules`: one speculative row each (default: mentored decoding at DEFAULT_BUDGETS).

    Rows are interleaved seed by seed, so a slow drift of the machine's speed spreads over all
    rows instead of biasing whichever row ran last. `on_sample(done, total)` reports progress.
    """
    plans = row_plans(rules if rules is not None else sweep_rules({Mentored.name: DEFAULT_BUDGETS}), draft_row)
    samples: dict[str, list[Sample]] = {plan.label: [] for plan in plans}
    total = len(plans) * len(seeds)
    for i, seed in enumerate(seeds):
        for j, plan in enumerate(plans):
            samples[plan.label].append(generate(plan.mode, plan.rule, seed))
            if on_sample is not None:
                on_sample(i * len(plans) + j + 1, total)
    reference = [list(s.token_ids) for s in samples[TARGET_ROW]]
    rows = [_row(plan, samples[plan.label], reference, score) for plan in plans]
    route = samples[plans[-1].label][0].route if seeds else None
    lanes = {
        seed: {plan.label: lane for plan in plans if (lane := samples[plan.label][i].lane) is not None}
        for i, seed in enumerate(seeds)
    }
    budgets_run = [r.tv_budget for r in rows if r.tv_budget is not None]
    return FidelityReport(list(seeds), budgets_run, route, rows, {s: by_row for s, by_row in lanes.items() if by_row})


def _row(plan: RowPlan, samples: Sequence[Sample], reference: Sequence[Sequence[int]], score: Score) -> FidelityRow:
    outputs = [list(s.token_ids) for s in samples]
    per_token = [statistics.fmean(score(ids)) if ids else None for ids in outputs]
    similar = similarities(outputs, reference, leave_one_out=plan.mode == "target")
    scored = [
        ScoredSample(
            seed=s.seed,
            token_ids=ids,
            finish_reason=s.finish_reason,
            tokens_per_s=s.metrics.get("tokens_per_s"),
            log_likelihood_per_token=ll,
            similarity_to_target=sim,
        )
        for s, ids, ll, sim in zip(samples, outputs, per_token, similar, strict=True)
    ]
    log_likelihood, se = mean_and_se(per_token)
    speculative = plan.mode == "speculative"
    accepted = _total(samples, "num_accepted_draft_tokens")
    num_tokens = sum(len(ids) for ids in outputs)
    rule = plan.rule
    return FidelityRow(
        label=plan.label,
        mode=plan.mode,
        tv_budget=rule.tv_budget if isinstance(rule, Mentored) else None,
        num_samples=len(samples),
        draft_acceptance_rate=draft_acceptance_rate(accepted, _total(samples, "num_draft_tokens"))
        if speculative
        else None,
        mean_acceptance_length=mean_acceptance_length(accepted, _total(samples, "num_spec_steps"))
        if speculative
        else None,
        tokens_per_s=median(s.tokens_per_s for s in scored),
        log_likelihood_per_token=log_likelihood,
        log_likelihood_se=se,
        distinct_1=distinct_n(outputs, 1),
        distinct_2=distinct_n(outputs, 2),
        mean_length=statistics.fmean(len(ids) for ids in outputs) if outputs else 0.0,
        similarity_to_target=mean_and_se(similar)[0],
        tv_spent_per_token=_ratio(_total(samples, "tv_spent"), num_tokens) if speculative else None,
        samples=scored,
        rule=rule.name if rule is not None else None,
        knob=rule.value if rule is not None else None,
    )


def engine_generator(
    stream: EventStream, prompt: str, prompt_token_ids: Sequence[int], settings: SpecSettings, max_tokens: int
) -> Generate:
    """A Generate over an event stream; call the result where its models may run."""

    def generate(mode: Mode, rule: AcceptanceRule | None, seed: int) -> Sample:
        # EOS ends a sample as it would end a real answer: length is part of what may change.
        request = Request(prompt, tuple(prompt_token_ids), mode, seed, max_tokens, ignore_eos=False)
        ruled = settings
        if rule is not None:
            ruled = replace(settings, rule=rule.name, rule_params=rule.into_params(settings.rule_params))
        controls = LiveControls(ruled, stream.drafters)
        lane = LaneRecord(mode)
        for event in stream.generate(request, controls):
            lane.add(event)
        assert lane.done is not None and lane.start is not None
        done = lane.done
        return Sample(
            seed=seed,
            token_ids=done.token_ids,
            finish_reason=done.finish_reason,
            metrics=done.metrics,
            route=lane.start.drafter,
            lane=lane,
        )

    return generate


# The report file.


def report_path(directory: Path, now: datetime, suffix: str = ".json") -> Path:
    """fidelity_<timestamp><suffix>, with a counter if a report of the same second exists."""
    return free_path(directory, f"fidelity_{now.strftime('%Y-%m-%dT%H-%M-%S')}", suffix)


def _unwritable(directory: Path, exc: OSError) -> SpecplayError:
    return SpecplayError(
        f"cannot write the fidelity report to {directory}: {exc.strerror or exc}; "
        "choose another folder with --sessions-dir or SPECPLAY_SESSIONS_DIR"
    )


def check_writable(directory: Path) -> None:
    """Fail before the models run, not after, when the report could not be saved."""
    probe = directory / f".fidelity-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise _unwritable(directory, exc) from None


def write_report(report: Mapping[str, Any], path: Path) -> Path:
    """Written atomically: a reader sees no report or the whole one, never half of it."""
    text = dump_json(report, ensure_ascii=False, indent=1) + "\n"
    return write_output(path, text, fix="choose another folder with --sessions-dir or SPECPLAY_SESSIONS_DIR")
