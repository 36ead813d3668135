"""`specplay costs`: why is it slower, and which k? The round's costs measured here (the verify
pass row count by row count, a target step, each drafter's step), acceptance measured per
drafter, and the speedup each k is predicted to give from them, with the k to set."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from specplay.backends import blas_warning, open_stream, thread_cleanup
from specplay.cli.configure import given, run_config
from specplay.cli.diff import open_session
from specplay.cli.flags import (
    add_backend_flags,
    add_decoding_flags,
    add_model_flags,
    add_prompt_flags,
    add_sessions_dir_flag,
)
from specplay.cli.render import warn
from specplay.config.run_config import RunConfig, check_models
from specplay.engine.controls import LiveControls
from specplay.engine.costs import MAX_ROWS, REPEATS, RoundCosts, RoundsMeasured, measure_costs
from specplay.engine.events import RoundEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.speedup import KPrediction, recommended_k
from specplay.errors import ConfigError
from specplay.runner.thread import ModelThread

ACCEPTANCE_TOKENS = 96


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "costs",
        help="measure what a round costs here and recommend a k per drafter",
        description="Times the target's verify pass over 1..--max-rows rows at the prompt's length, one target "
        "step and each drafter's step; measures each drafter's acceptance by position on a short run of the "
        "prompt (or reads it from --sessions); predicts the speedup at each k from both and recommends a k.",
    )
    add_model_flags(parser)
    add_backend_flags(parser)
    add_prompt_flags(parser)
    add_decoding_flags(parser)
    measure = parser.add_argument_group("measurement")
    measure.add_argument("--max-rows", type=int, default=MAX_ROWS, help=f"verify rows timed, 1..N (default {MAX_ROWS})")
    measure.add_argument("--repeats", type=int, default=REPEATS, help=f"timings per row count (default {REPEATS})")
    measure.add_argument(
        "--acceptance-tokens",
        type=int,
        default=ACCEPTANCE_TOKENS,
        help=f"tokens of the short run that measures each drafter's acceptance (default {ACCEPTANCE_TOKENS})",
    )
    measure.add_argument(
        "--sessions",
        nargs="+",
        metavar="SESSION",
        help="read acceptance by position from these sessions' rounds (per route) instead of a short run",
    )
    measure.add_argument("--json", action="store_true", help="one JSON object: costs, acceptance, predictions")
    add_sessions_dir_flag(parser)
    parser.set_defaults(command=costs)


def costs(args: argparse.Namespace) -> int:
    config = run_config(given(args))
    check_models(config)
    if config.request.prompt is None:
        raise ConfigError("prompt", "or --prompt-file is required: costs are measured at the prompt's length")
    if config.native:
        raise ConfigError("vllm_native", "does not apply: in native mode the server runs the rounds; leave it out")
    if not config.drafter_names:
        raise ConfigError("draft", "is needed: give at least one drafter")
    k_max = config.settings.policy_params.k_max  # predictions for k = 1..k_max (--k-max, the policies' bound)
    for name, value, least in (("max_rows", args.max_rows, 2), ("repeats", args.repeats, 1)):
        if not least <= value <= 64:
            raise ConfigError(name, f"must be from {least} to 64 (got {value})")
    if args.max_rows < k_max + 1:
        raise ConfigError(
            "max_rows", f"must be at least k_max + 1 = {k_max + 1} to predict every k (got {args.max_rows})"
        )
    if args.acceptance_tokens < 2:
        raise ConfigError("acceptance_tokens", f"must be at least 2 (got {args.acceptance_tokens})")
    if message := blas_warning(config):
        warn(message)
    from_sessions = _session_acceptance(args.sessions, args) if args.sessions else None
    thread = ModelThread(on_exit=thread_cleanup(config))
    try:
        source = thread.call(lambda: open_stream(config))
        assert isinstance(source, SpecEngine)  # not native: checked above
        prompt_ids = thread.call(lambda: source.encode(config.request.prompt or "", config.request.raw))
        measured = thread.call(
            lambda: measure_costs(
                source,
                prompt_ids,
                config.settings.sampling,
                config.settings.acceptance_rule,
                max_rows=args.max_rows,
                repeats=args.repeats,
            )
        )
        if from_sessions is None:
            acceptance = {
                d: thread.call(lambda d=d: _run_acceptance(source, config, prompt_ids, d, args.acceptance_tokens))
                for d in config.drafter_names
            }
        else:
            acceptance = from_sessions
    finally:
        thread.close()
    timed = max(measured.verify_ms)
    if timed < args.max_rows:
        warn(
            f"the verify pass was timed up to {timed} rows only: no drafter drafted longer (prompt lookup drafts "
            "only what it finds to copy); add a model drafter, e.g. --draft self=TARGET, to time every row count"
        )
    report = _report(measured, acceptance, k_max, len(prompt_ids))
    print(json.dumps(report) if args.json else "\n".join(_lines(report)))
    return 0


def _run_acceptance(
    source: SpecEngine, config: RunConfig, prompt_ids: Sequence[int], drafter: str, max_tokens: int
) -> RoundsMeasured:
    """Acceptance by position on a short run of the prompt at k = k_max, routed to `drafter`, and
    the host's work per round in it."""
    k = config.settings.policy_params.k_max
    settings = config.settings.changed(k=k, policy="fixed", route=drafter, counterfactual=False)
    request = Request(config.request.prompt or "", tuple(prompt_ids), "speculative", config.request.seed, max_tokens)
    events = source.generate(request, LiveControls(settings, source.drafters))
    # Rounds near the end draft less to stop at max_tokens: not the drafter's doing, left out.
    whole = (e for e in events if isinstance(e, RoundEvent) and e.token_index + k <= max_tokens)
    return RoundsMeasured.of_rounds(whole).asked(k)


def _session_acceptance(names: Sequence[str], args: argparse.Namespace) -> dict[str, RoundsMeasured]:
    """Per route, acceptance by position and host work per round over the sessions' rounds."""
    by_route: dict[str, list[RoundEvent]] = {}
    for name in names:
        session = open_session(name, args)
        for event in session.main.rounds:
            by_route.setdefault(event.route, []).append(event)
    return {route: RoundsMeasured.of_rounds(rounds) for route, rounds in by_route.items()}


def _report(
    measured: RoundCosts, rounds_by_drafter: dict[str, RoundsMeasured], k_max: int, prompt_tokens: int
) -> dict[str, Any]:
    """The `--json` object; its names are what other tools read."""
    verify = {rows: t.ms for rows, t in measured.verify_ms.items()}
    target_ms = measured.target_step_ms.ms
    drafters: dict[str, Any] = {}
    for name, alone in measured.draft_step_ms.items():
        rounds = rounds_by_drafter.get(name)
        call_alone_ms = measured.call_ms(name)
        # The drafter's times as its own rounds paid them where they drafted, else as timed alone.
        step_ms, call_ms, host_ms = alone.ms, call_alone_ms, None
        predictions: list[KPrediction] = []
        if rounds is not None:
            step_ms, call_ms = rounds.draft_costs(alone.ms, call_alone_ms)
            host_ms = rounds.host_ms
            predictions = rounds.predict(verify, alone.ms, target_ms, k_max, draft_call_ms=call_alone_ms)
        best = recommended_k(predictions)
        drafters[name] = {
            "draft_step_ms": step_ms,
            "draft_call_ms": call_ms,
            "draft_step_alone_ms": alone.ms,
            "draft_step_alone_spread_ms": alone.spread_ms,
            "draft_call_alone_ms": call_alone_ms,
            "c": step_ms / target_ms if target_ms > 0 else None,
            "acceptance_per_position": rounds.acceptance_per_position if rounds is not None else None,
            "drafted_share_per_position": rounds.drafted_share if rounds is not None else None,
            "kept_share_per_position": rounds.kept_share if rounds is not None else None,
            "host_ms_per_round": host_ms,
            "predicted_speedup_by_k": [asdict(p) for p in predictions],
            "recommended_k": best.k if best is not None else None,
            "recommended_speedup": best.speedup if best is not None else None,
        }
    return {
        "prompt_tokens": prompt_tokens,
        "includes_http": measured.includes_http,
        "target_step_ms": target_ms,
        "target_step_spread_ms": measured.target_step_ms.spread_ms,
        "verify_ms": [{"rows": rows, "ms": t.ms, "spread_ms": t.spread_ms} for rows, t in measured.verify_ms.items()],
        "drafters": drafters,
    }


def _lines(report: dict[str, Any]) -> list[str]:
    target_ms = report["target_step_ms"]
    http = " (each time includes an HTTP round trip)" if report["includes_http"] else ""
    lines = [
        f"costs at the prompt's {report['prompt_tokens']} tokens{http}; medians, spread in brackets",
        f"target step {target_ms:.2f} ms (±{report['target_step_spread_ms']:.2f})",
        "verify pass by rows, in ms and in target steps:",
    ]
    for row in report["verify_ms"]:
        lines.append(
            f"  {row['rows']:>3} rows  {row['ms']:8.2f} ms (±{row['spread_ms']:.2f})  {row['ms'] / target_ms:5.2f}"
        )
    for name, drafter in report["drafters"].items():
        acceptance = drafter["acceptance_per_position"] or []
        lines.append("")
        lines.append(
            f"drafter {name}: step {drafter['draft_step_ms']:.2f} ms and {drafter['draft_call_ms']:.2f} ms a draft, "
            f"c {drafter['c']:.3f}; "
            f"acceptance by position {' '.join(f'{a:.2f}' for a in acceptance) or '(none measured)'}"
        )
        for p in drafter["predicted_speedup_by_k"]:
            mark = "  <- recommended" if p["k"] == drafter["recommended_k"] else ""
            lines.append(
                f"  k {p['k']:>2}  {p['expected_tokens']:.2f} tokens per round in {p['round_ms']:.1f} ms  "
                f"→ {p['speedup']:.2f}×  (breaks even at acceptance {p['break_even_acceptance']:.2f}){mark}"
            )
    return lines
