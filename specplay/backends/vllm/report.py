"""What inspection mode can honestly say about speed: wall time here is mostly HTTP round trips
and server recomputes, so it reports tokens per target call and a modelled speedup instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specplay.engine.speedup import predict_modelled

EXACT_KEYS = (
    "corrections",  # corrections drawn exactly
    "capped",  # every draw refused up to the cap: the top-K residual stood in
    "inexact",  # asked for, but p_target(y) or p_draft only bracketed at these settings: top-K residual
    "requests",  # extra HTTP requests in all
    "target_requests",  # sampling requests to the target (n samples each)
    "samples",  # samples asked of the target
    "drafter_requests",  # logprob_token_ids look-ups on drafter servers
    "local_lookups",  # local drafter rows recomputed (their listed top was cut)
)
"""What exact corrections cost, as each generation counts them."""


def inspection_report(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """From a speculative lane's metrics and the account its generation left under "vllm": tokens
    per target call (its mean acceptance length), the modelled speedup (engine/speedup.py, with c
    one drafted token's time over one verify call's), which verify strategies ran, whether any
    position was judged from the target's top-K only, and what exact corrections cost (None when
    off)."""
    account = metrics.get("vllm") or {}
    prediction = predict_modelled(metrics)
    return {
        "verify_strategies": dict(account.get("verify_strategies") or {}),
        "approximate": bool(account.get("approximate")),
        "tokens_per_target_call": metrics.get("mean_acceptance_length"),
        "cost_ratio": prediction.cost_ratio,
        "modelled_speedup": prediction.speedup,
        "exact_correction": account.get("exact_correction"),
    }


def report_line(report: Mapping[str, Any]) -> str:
    parts = ["vllm inspection"]
    if report["tokens_per_target_call"] is not None:
        parts.append(f"{report['tokens_per_target_call']:.2f} tokens per target call")
    if report["modelled_speedup"] is not None:
        parts.append(f"modelled speedup {report['modelled_speedup']:.2f}x (c = {report['cost_ratio']:.2f})")
    strategies = ", ".join(f"{name} ×{count}" for name, count in report["verify_strategies"].items())
    if strategies:
        parts.append(f"verified by {strategies}")
    if (exact := report.get("exact_correction")) is not None:
        parts.append(exact_line(exact))
    parts.append(
        "approximate: p_target known as top-K only (TV bracket and error bound per token in --json)"
        if report["approximate"]
        else "exact"
    )
    parts.append("tokens/s here measures HTTP round trips, not speculative speed")
    return " · ".join(parts)


def exact_line(exact: Mapping[str, int]) -> str:
    line = (
        f"exact corrections: {exact['corrections']} from {exact['requests']} extra requests "
        f"({exact['samples']} target samples, {exact['drafter_requests']} drafter look-ups)"
    )
    if exact["capped"]:
        line += f", {exact['capped']} past the sample cap from top-K"
    if exact["inexact"]:
        line += f", {exact['inexact']} from top-K (p_target of a sample not exact at these settings)"
    return line
