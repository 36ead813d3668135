"""The stats lines under each lane."""

from __future__ import annotations

from textual.content import Content

from specplay.ui.stats import Comparison, LaneTally


def _num(value: float | None, spec: str, unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def target_stats(tally: LaneTally) -> Content:
    line = (
        f"{_num(tally.tokens_per_s, '.1f')} tokens/s  {tally.tokens} tokens  {tally.busy_s:.2f} s"
        f"  step {_num(tally.mean_step_ms, '.1f', ' ms')}"
    )
    return Content(line + _finish(tally))


def speculative_stats(tally: LaneTally, comparison: Comparison, remote: bool = False) -> Content:
    """`remote`: the models run on servers, so tokens/s would time HTTP round trips; the lane
    says tokens per target call and a modelled speedup instead (`comparison` from `modelled`)."""
    if remote:
        first = (
            f"{_num(tally.mean_acceptance_length, '.2f')} tokens per target call  {tally.tokens} tokens"
            f"  {tally.rounds} rounds{_finish(tally)}"
        )
        speed = f"speedup {_num(comparison.predicted_speedup, '.2f', '×')} modelled"
    else:
        first = (
            f"{_num(tally.tokens_per_s, '.1f')} tokens/s  {tally.tokens} tokens  {tally.busy_s:.2f} s"
            f"  {tally.rounds} rounds{_finish(tally)}"
        )
        speed = (
            f"speedup {_num(comparison.speedup, '.2f', '×')} measured"
            f"  {_num(comparison.predicted_speedup, '.2f', '×')} predicted"
        )
    lines = [
        first,
        f"draft acceptance rate {_num(tally.draft_acceptance_rate, '.2f')}"
        f"  mean acceptance length {_num(tally.mean_acceptance_length, '.2f')}"
        f"  TV spent {tally.tv_spent:.2f}",
        f"{speed} (α {_num(tally.alpha, '.2f')}, k {_num(tally.mean_k, '.1f')}"
        f", c {_num(comparison.cost_ratio, '.2f')})",
    ]
    if remote:
        lines.append(_exactness(tally))
    return Content("\n".join(lines))


def _exactness(tally: LaneTally) -> str:
    if not tally.error_bound_total:
        return "exact: every judged position knew both distributions (c: draft token / verify call)"
    return (
        f"approximate: top-K of p_target only, output within TV {tally.error_bound_total:.3f} of the rule's"
        " (c: draft token / verify call)"
    )


def _finish(tally: LaneTally) -> str:
    return f"  [{tally.finish_reason}]" if tally.finish_reason else ""
