"""`specplay costs`: why is it slower, and which k? The round's costs measured here (the verify
pass row count by row count, a target step, each drafter's step), acceptance measured per
drafter, and the speedup each k is predicted to give from them, with the k to set."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from specplay.backends import blas_threads, blas_warning, open_stream, thread_cleanup
from specplay.cli.configure import given, run_config
from specplay.cli.diff import open_session
from specplay.cli.flags import (
    add_backend_flags,
    add_decoding_flags,
    add_model_flags,
    add_output_flags,
    add_prompt_flags,
    add_sessions_dir_flag,
)
from specplay.cli.render import inform, warn
from specplay.config.capabilities import capabilities_of
from specplay.config.model_sets import models_named
from specplay.config.run_config import RequestConfig, check_models, remembered_line
from specplay.drafters import kind_of
from specplay.engine.costs import (
    PARTS,
    REPEATS,
    TREE_WIDTHS,
    DrafterPrediction,
    RoundCosts,
    RoundsMeasured,
    disturbance,
    measure_costs,
    measure_drafter,
    measure_rounds,
    predict_drafter,
)
from specplay.engine.events import RoundEvent, round_fault
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import K_LIMIT, NONE_ROUTE, PolicyParams
from specplay.engine.speedup import TreePrediction
from specplay.errors import ConfigError
from specplay.files.json_text import dump_json
from specplay.runner.thread import ModelThread
from specplay.store import Session


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "costs",
        help="measure what a round costs here and recommend a k per drafter",
        description="Times the target's verify pass over 1..--max-rows rows at the prompt's length, one target "
        "step and each drafter's step; measures each drafter's acceptance by position on a run of the prompt "
        "as long as the runs it predicts for (--max-tokens), or reads it from --sessions; predicts the speedup "
        "at each k from both and recommends a k, or the route none where no k pays.",
    )
    add_model_flags(parser)
    add_backend_flags(parser)
    add_prompt_flags(parser)
    add_decoding_flags(parser)
    for action in parser._actions:  # --k-max is the policies' bound (flags.py); here it bounds the k predicted
        if action.dest == "k_max":
            action.help = f"the largest k predicted, and the acceptance run's k (default {PolicyParams().k_max})"
    measure = parser.add_argument_group("measurement")
    add_output_flags(measure)
    for action in measure._group_actions:  # the output flags of `run`: here, the runs predicted for
        if action.dest == "max_tokens":
            action.help = (
                f"tokens the runs predicted for generate, the length of the run that measures acceptance "
                f"(default {RequestConfig().max_tokens}, as `specplay run`)"
            )
        elif action.dest == "ignore_eos":
            action.help = (
                "the runs predicted for generate --max-tokens tokens whatever comes, as the acceptance run then does"
            )
    measure.add_argument(
        "--max-rows",
        type=int,
        default=None,
        help="verify rows timed, 1..N (default: --k-max + 1, the longest round predicted); a smaller N predicts "
        "k up to N - 1 only, a larger one times rows no k predicted uses",
    )
    measure.add_argument(
        "--repeats",
        type=int,
        default=REPEATS,
        help=f"passes, each timing every row count and drafter between two short target-only runs (default {REPEATS})",
    )
    measure.add_argument(
        "--acceptance-tokens",
        type=int,
        default=None,
        help="tokens of the run that measures each drafter's acceptance (default: --max-tokens)",
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
    k_max = config.settings.policy_params.k_max  # --k-max, the policies' bound
    max_rows = k_max + 1 if args.max_rows is None else args.max_rows
    # The most rows: those of the longest round a policy may ask for (k_max <= K_LIMIT drafts).
    for name, value, least, most in (("max_rows", max_rows, 2, K_LIMIT + 1), ("repeats", args.repeats, 1, 64)):
        if not least <= value <= most:
            raise ConfigError(name, f"must be from {least} to {most} (got {value})")
    acceptance_tokens = config.request.max_tokens if args.acceptance_tokens is None else args.acceptance_tokens
    if acceptance_tokens < 2:
        field = "acceptance_tokens" if args.acceptance_tokens is not None else "max_tokens"
        raise ConfigError(field, f"must be at least 2 (got {acceptance_tokens})")
    # A round of k drafts is verified over k + 1 rows: the rows timed bound the k predicted.
    k_limit = min(k_max, max_rows - 1)
    if k_limit < k_max:
        warn(
            f"predicting k up to {k_limit} only: --max-rows {max_rows} times verify passes of up to {max_rows} rows; "
            f"give --max-rows {k_max + 1} (or leave it out) for every k up to --k-max {k_max}"
        )
    if message := blas_warning(config):
        warn(message)
    if line := remembered_line(config):
        inform(line)
    from_sessions = _session_acceptance(args.sessions, args, config.drafter_names) if args.sessions else None
    thread = ModelThread(on_exit=thread_cleanup(config))
    try:
        stream = thread.call(lambda: open_stream(config))
        assert isinstance(stream, SpecEngine)  # not native: checked above
        prompt_ids = thread.call(lambda: stream.encode(config.request.prompt or "", config.request.raw))
        settings = config.settings
        measured = thread.call(
            lambda: measure_costs(
                stream,
                prompt_ids,
                settings.sampling,
                settings.acceptance_rule,
                max_rows=max_rows,
                repeats=args.repeats,
            )
        )
        if from_sessions is None:
            acceptance = {
                d: thread.call(
                    lambda d=d: measure_drafter(
                        stream,
                        prompt_ids,
                        settings,
                        d,
                        k=k_limit,
                        max_tokens=acceptance_tokens,
                        seed=config.request.seed,
                        ignore_eos=config.request.ignore_eos,
                        target_step_ms=measured.target_step_ms.ms,
                    )
                )
                for d in config.drafter_names
            }
        else:
            acceptance = from_sessions
        trees: dict[str, list[TreeRounds]] = {}
        for drafter in config.drafters:
            name = drafter.name
            best = predict_drafter(measured, name, acceptance[name], k_limit).best if name in acceptance else None
            grows = kind_of(drafter).grows_trees and capabilities_of(config).trees
            if from_sessions is not None or best is None or not grows:
                continue  # where a drafter grows trees, they are measured as its chains are
            for width in TREE_WIDTHS:
                nodes = tree_nodes(best.k, width)
                if nodes > k_limit:
                    continue
                measured_tree = thread.call(
                    lambda name=name, width=width, nodes=nodes: measure_rounds(
                        stream,
                        prompt_ids,
                        settings,
                        name,
                        k=nodes,
                        max_tokens=acceptance_tokens,
                        seed=config.request.seed,
                        ignore_eos=config.request.ignore_eos,
                        target_step_ms=measured.target_step_ms.ms,
                        width=width,
                    )
                )
                trees.setdefault(name, []).append((width, nodes, measured_tree))
    finally:
        thread.close()
    # Every time measured holds at this thread count, which the load at start-up may have lowered.
    length = acceptance_tokens if from_sessions is None else None
    report = _report(measured, acceptance, k_limit, len(prompt_ids), trees, length)
    report |= {"blas_threads": blas_threads(config), "models": models_named(config)}
    print(dump_json(report) if args.json else "\n".join(_lines(report)))
    return 0


def _session_acceptance(
    names: Sequence[str], args: argparse.Namespace, drafters: Sequence[str]
) -> dict[str, RoundsMeasured]:
    """Per route, acceptance by position and host work per round over the sessions' rounds. A
    session with a time or count no round can have is left out, in a line naming it and the field;
    those that drafted with none of this run's drafters are named in one line."""
    by_route: dict[str, list[RoundEvent]] = {}
    unmatched: list[Session] = []
    faults: list[str] = []
    for name in names:
        session = open_session(name, args)
        rounds = [event for lane in session.main_lanes for event in lane.rounds]  # a conversation's every turn
        if (fault := next(filter(None, map(round_fault, rounds)), None)) is not None:
            faults.append(f"session {session.id}: {fault}")
            continue
        if not any(event.drafter in drafters for event in rounds):
            unmatched.append(session)
            continue
        for event in rounds:
            by_route.setdefault(event.drafter, []).append(event)
    if not by_route:
        raise ConfigError("sessions", _none_usable(faults, unmatched, drafters))
    for fault in faults:
        warn(f"leaving out {fault}")
    if unmatched:
        warn(f"leaving out {_unmatched(unmatched, drafters)}")
    return {route: RoundsMeasured.of_rounds(rounds, parts=PARTS) for route, rounds in by_route.items()}


def _unmatched(sessions: Sequence[Session], drafters: Sequence[str]) -> str:
    used = sorted({event.drafter for session in sessions for lane in session.main_lanes for event in lane.rounds})
    return (
        f"session{'s' if len(sessions) > 1 else ''} {', '.join(s.id for s in sessions)}, drafted with "
        f"{', '.join(used) or 'no drafter'}: none is among this run's drafters ({', '.join(drafters)}); "
        "name theirs with --draft NAME=SOURCE"
    )


def _none_usable(faults: Sequence[str], unmatched: Sequence[Session], drafters: Sequence[str]) -> str:
    """Why no session given could be read (the sessions' own faults first)."""
    reasons = [*faults, *([_unmatched(unmatched, drafters)] if unmatched else [])]
    return f"gives no rounds to read acceptance from ({'; '.join(reasons)}); leave it out to measure acceptance here"


def _report(
    measured: RoundCosts,
    rounds_by_drafter: dict[str, RoundsMeasured],
    k_max: int,
    prompt_tokens: int,
    tree_rounds: dict[str, list[TreeRounds]] | None = None,
    acceptance_tokens: int | None = None,
) -> dict[str, Any]:
    """The `--json` object; its names are what other tools read. `acceptance_tokens`: the length
    of the runs acceptance was measured over, the runs predicted for (None: read from sessions)."""
    target_ms = measured.target_step_ms.ms
    drafters: dict[str, Any] = {}
    predicted: list[DrafterPrediction] = []
    for name, alone in measured.draft_step_ms.items():
        rounds = rounds_by_drafter.get(name)
        call_alone_ms = measured.call_ms(name)
        # The drafter's times as its own rounds paid them where they drafted, else as timed alone.
        step_ms, call_ms, host_ms = alone.ms, call_alone_ms, None
        costs_from = "alone"
        prediction = DrafterPrediction([], [])
        if rounds is not None:
            costs_from = "rounds" if rounds.draft_line_ms is not None else "rounds_and_alone"
            step_ms, call_ms = rounds.draft_costs(alone.ms, call_alone_ms)
            host_ms = rounds.host_ms
            prediction = predict_drafter(measured, name, rounds, k_max)
            predicted.append(prediction)
        best = prediction.best
        chains = {p.k: p for p in prediction.by_k}
        trees = [
            tree
            for width, nodes, measured_tree in (tree_rounds or {}).get(name, [])
            if (chain := chains.get(nodes)) is not None
            and (tree := measured_tree.predict_tree(chain, width, measured.verify_curve_ms(), target_ms)) is not None
        ]
        best_tree = max(trees, key=lambda t: (t.speedup, -t.nodes), default=None)
        paying = prediction.paying
        pays = paying is not None or (best_tree is not None and best_tree.speedup > 1)
        parts = rounds.parts if rounds is not None else ()
        drafters[name] = {
            "draft_step_ms": step_ms,
            "draft_call_ms": call_ms,
            "draft_costs_from": costs_from,
            "draft_step_alone_ms": alone.ms,
            "draft_step_alone_spread_ms": alone.spread_ms,
            "draft_call_alone_ms": call_alone_ms,
            "c": step_ms / target_ms if target_ms > 0 else None,
            "acceptance_per_position": rounds.acceptance_per_position if rounds is not None else None,
            "drafted_share_per_position": rounds.drafted_share if rounds is not None else None,
            "kept_share_per_position": rounds.kept_share if rounds is not None else None,
            "host_ms_per_round": host_ms,
            "predicted_speedup_by_k": [asdict(p) for p in prediction.by_k],
            # Where no k pays, no k is recommended: the route none is (`recommended_route`).
            "recommended_k": paying.k if paying is not None else None,
            "recommended_speedup": paying.speedup if paying is not None else None,
            "recommended_speedup_range": list(prediction.speedup_range(paying.k) or ()) if paying is not None else None,
            "recommended_route": (name if pays else NONE_ROUTE) if best is not None else None,
            "best_k": best.k if best is not None else None,
            "best_speedup": best.speedup if best is not None else None,
            "acceptance_rounds": rounds.rounds if rounds is not None else None,
            "mean_acceptance_length_by_part": [part.mean_acceptance_length for part in parts],
            "best_speedup_by_part": prediction.part_speedups(best.k) if best is not None else [],
            "trees": [_tree(t) for t in trees],
            "recommended_tree": _tree(best_tree) if best_tree is not None else None,
        }
    reason = disturbance(measured, predicted)
    return {
        "prompt_tokens": prompt_tokens,
        "acceptance_tokens": acceptance_tokens,
        "includes_http": measured.includes_http,
        "target_step_ms": target_ms,
        "target_step_spread_ms": measured.target_step_ms.spread_ms,
        "target_step_drift": measured.target_drift(),
        "verify_ms": [{"rows": rows, "ms": t.ms, "spread_ms": t.spread_ms} for rows, t in measured.verify_ms.items()],
        "drafters": drafters,
        "disturbed": reason is not None,
        "disturbed_reason": reason,
    }


TreeRounds = tuple[int, int, RoundsMeasured]
"""A drafter's trees as measured: (width, nodes, their rounds)."""


def tree_nodes(k: int, width: int) -> int:
    """The nodes of the tree `costs` measures beside the chain recommended at k: as many as that
    chain drafts, and two levels at least (a shorter chain's rows hold no tree worth the name)."""
    return max(k, 2 * width)


def _tree(tree: TreePrediction) -> dict[str, Any]:
    """A tree's prediction beside the chain of as many nodes, as `--json` names it."""
    return {
        "width": tree.width,
        "nodes": tree.nodes,
        "depth": tree.depth,
        "expected_tokens": tree.expected_tokens,
        "round_ms": tree.round_ms,
        "speedup": tree.speedup,
        "chain_speedup": tree.chain.speedup,
        "vs_chain": tree.vs_chain,
    }


COSTS_FROM = {
    "rounds": "as its rounds paid them, drafting the longest k and 1",
    "rounds_and_alone": "its rounds' drafting, the step timed alone",
    "alone": "timed alone",
}
"""`draft_costs_from` in words: where the drafter's times that the prediction uses came from."""


def _lines(report: dict[str, Any]) -> list[str]:
    target_ms = report["target_step_ms"]
    http = " (each time includes an HTTP round trip)" if report["includes_http"] else ""
    length = report.get("acceptance_tokens")
    runs = f", acceptance over runs of {length} tokens" if length else ""
    lines = [
        *([f"models: {report['models']}"] if report.get("models") else []),
        f"costs at the prompt's {report['prompt_tokens']} tokens{runs}{http}; medians, spread in brackets",
        *([f"OpenBLAS threads {report['blas_threads']}"] if report.get("blas_threads") else []),
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
            f"drafter {name}: step {drafter['draft_step_ms']:.2f} ms and {drafter['draft_call_ms']:.2f} ms a draft "
            f"({COSTS_FROM[drafter['draft_costs_from']]}), c {drafter['c']:.3f}; "
            f"acceptance by position {' '.join(f'{a:.2f}' for a in acceptance) or '(none measured)'}"
        )
        if spread := _acceptance_spread(drafter):
            lines.append(spread)
        for p in drafter["predicted_speedup_by_k"]:
            mark = "  <- recommended" if p["k"] == drafter["recommended_k"] else ""
            if mark and drafter["recommended_speedup_range"]:
                low, high = drafter["recommended_speedup_range"]
                mark += f" ({low:.2f}–{high:.2f}× over the passes)"
            lines.append(
                f"  k {p['k']:>2}  {p['expected_tokens']:.2f} tokens per round in {p['round_ms']:.1f} ms  "
                f"→ {p['speedup']:.2f}×  (breaks even at acceptance {p['break_even_acceptance']:.2f}){mark}"
            )
        if drafter["recommended_k"] is None and drafter["best_k"] is not None:
            lines.append(_no_k_pays(name, drafter))
        for tree in drafter["trees"]:
            recommended = drafter["recommended_speedup"]
            beats = tree["speedup"] > (recommended if recommended is not None else 1.0)
            better = "faster than the recommended k" if recommended is not None else "pays where no chain does"
            mark = f"  <- {better}" if tree == drafter["recommended_tree"] and beats else ""
            lines.append(
                f"  tree of {tree['nodes']}, width {tree['width']}: {tree['expected_tokens']:.2f} tokens per round in "
                f"{tree['round_ms']:.1f} ms → {tree['speedup']:.2f}×, {tree['vs_chain']:.2f}× the chain of "
                f"{tree['nodes']} (`--width {tree['width']} --tree {tree['nodes']}`){mark}"
            )
    if report["disturbed"]:
        lines.append("")
        lines.append(f"warning: {report['disturbed_reason']}; measure again on a quieter machine, or more --repeats")
    return lines


def _acceptance_spread(drafter: dict[str, Any]) -> str | None:
    """How far acceptance moved along the text: each part's mean acceptance length and what the
    fastest k is predicted to give from each part's acceptance alone."""
    lengths, speedups = drafter["mean_acceptance_length_by_part"], drafter["best_speedup_by_part"]
    if not lengths:
        return None
    line = (
        f"  acceptance along the text: mean acceptance length {', '.join(f'{a:.2f}' for a in lengths)} "
        f"in {len(lengths)} stretches of its {drafter['acceptance_rounds']} rounds, in order"
    )
    if speedups:
        line += f"; from each alone k {drafter['best_k']} is predicted at {min(speedups):.2f}–{max(speedups):.2f}×"
    return line


def _no_k_pays(name: str, drafter: dict[str, Any]) -> str:
    """The advice where every k is predicted slower than the target alone."""
    return (
        f"  no k pays: the fastest, k {drafter['best_k']}, is predicted at {drafter['best_speedup']:.2f}×, slower "
        f"than the target alone; recommended: the route {NONE_ROUTE} (`--route {NONE_ROUTE}`), not {name}"
    )
