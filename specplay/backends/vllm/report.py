"""What inspection mode can honestly say about speed: wall time here is mostly HTTP round trips
and server recomputes, so it reports tokens per target call and a modelled speedup instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specplay.engine.metrics import predicted_speedup


def inspection_report(
    metrics: Mapping[str, Any], strategies_run: Mapping[str, int], approximate: bool
) -> dict[str, Any]:
    """From a speculative lane's metrics: tokens per target call (its mean acceptance length), the
    speedup Leviathan's formula predicts from the measured acceptance and draft/target cost ratio
    (c = one drafted token's time over one verify's), which verify strategies ran, and whether any
    position was judged from the target's top-K only."""
    steps, drafted = metrics.get("num_spec_steps") or 0, metrics.get("num_draft_tokens") or 0
    report: dict[str, Any] = {
        "verify_strategies": dict(strategies_run),
        "approximate": approximate,
        "tokens_per_target_call": metrics.get("mean_acceptance_length"),
        "cost_ratio": None,
        "modelled_speedup": None,
    }
    draft_ms, verify_ms = metrics.get("draft_ms") or 0.0, metrics.get("verify_ms") or 0.0
    if steps and drafted and verify_ms > 0:
        cost_ratio = (draft_ms / drafted) / (verify_ms / steps)
        alpha = metrics.get("draft_acceptance_rate") or 0.0
        report["cost_ratio"] = cost_ratio
        report["modelled_speedup"] = predicted_speedup(alpha, drafted / steps, cost_ratio)
    return report


def report_line(report: Mapping[str, Any]) -> str:
    parts = ["vllm inspection"]
    if report["tokens_per_target_call"] is not None:
        parts.append(f"{report['tokens_per_target_call']:.2f} tokens per target call")
    if report["modelled_speedup"] is not None:
        parts.append(f"modelled speedup {report['modelled_speedup']:.2f}x (c = {report['cost_ratio']:.2f})")
    strategies = ", ".join(f"{name} ×{count}" for name, count in report["verify_strategies"].items())
    if strategies:
        parts.append(f"verified by {strategies}")
    parts.append(
        "approximate: p_target known as top-K only (TV bracket and error bound per token in --json)"
        if report["approximate"]
        else "exact"
    )
    parts.append("tokens/s here measures HTTP round trips, not speculative speed")
    return " · ".join(parts)
