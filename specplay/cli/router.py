"""`specplay router`: train a learned router on counterfactual sessions (`train`), and see how it
picks on held-out ones beside the heuristic (`eval`). `--router FILE` makes `--route auto` of run,
tui and bench use it."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specplay.cli.configure import path_flag
from specplay.cli.flags import Parser
from specplay.display.text import counted
from specplay.files.json_text import dump_json
from specplay.router_training.evaluate import evaluate, report
from specplay.router_training.examples import read_examples, score_kind
from specplay.router_training.router_file import load_router, write_router
from specplay.router_training.scores import SCORE_KINDS, UNITS
from specplay.router_training.train import LEAVE_ONE_OUT, Trained, prompt_hash, train

SCORE_HELP = (
    "speed: the drafter's tokens per second of its own rounds; acceptance: its mean acceptance length "
    "(tokens per round)"
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "router",
        help="train a learned router on counterfactual sessions, and evaluate it against the heuristic",
        description="A learned router picks, per request, the drafter that served prompts like it best in "
        "sessions run with counterfactual routes (specplay run --counterfactual --save), where every "
        "drafter was judged each round. `--router FILE` makes `--route auto` (run, tui, bench) use it.",
    )
    actions = parser.add_subparsers(metavar="ACTION", parser_class=Parser, required=True)
    sessions_help = "session files, or folders of them; those without counterfactual routes are skipped and counted"

    fit = actions.add_parser(
        "train",
        help="fit a router to the best drafter of each session",
        description="Fits a small classifier (hashed character n-grams of the prompt, and the heuristic's code "
        "score; multinomial logistic regression) to each session's best drafter: the highest tokens per "
        "second where every session's rounds were timed, else the highest mean acceptance length.",
    )
    fit.add_argument("sessions", nargs="+", metavar="SESSION|DIR", help=sessions_help)
    fit.add_argument("--out", required=True, metavar="FILE", help="the router file to write (JSON)")
    fit.add_argument("--score", choices=SCORE_KINDS, help=f"what best means ({SCORE_HELP}); default: speed if timed")
    fit.set_defaults(command=router_train)

    check = actions.add_parser(
        "eval",
        help="how often a router picks each held-out session's best drafter, and its regret, beside the heuristic",
        description="For each session (held out from training), the learned router's pick and the heuristic's "
        "(through the route map the session records, or the default one) against the session's best drafter; "
        "the share of best picks and the mean regret (the best drafter's score minus the pick's) of each, "
        "per category too where the sessions record their prompt's.",
    )
    check.add_argument("sessions", nargs="+", metavar="SESSION|DIR", help=sessions_help)
    check.add_argument("--router", required=True, metavar="FILE", help="a router file from `specplay router train`")
    check.add_argument("--score", choices=SCORE_KINDS, help=f"what best means ({SCORE_HELP}); default: the router's")
    check.add_argument("--json", action="store_true", help="one JSON object: the summary, per category, each case")
    check.set_defaults(command=router_eval)


def router_train(args: argparse.Namespace) -> int:
    out = path_flag(args.out, "out")
    found = read_examples(args.sessions, kind=args.score)
    kind = score_kind(found.examples, args.score)
    trained = train(found.examples, kind)
    size = write_router(out, trained.router, trained.trained_on)
    about = trained.trained_on
    labels = ", ".join(f"{name} {count}" for name, count in about["labels"].items())
    ties = f" ({about['ties']} ties, shared)" if about["ties"] else ""
    print(f"trained on {_sessions(about['sessions'])} of drafters {', '.join(found.drafters)}")
    print(f"best drafter by {UNITS[kind]}: {labels}{ties}")
    print(found.prompt_format_line())
    for line in found.skipped_lines():
        print(line)
    print(
        f"picks the best drafter of {trained.training_accuracy:.0%} of the sessions it was fitted to "
        "(`specplay router eval` on others says how it does on prompts it has not seen)"
    )
    print(_validation_line(trained))
    for line in trained.warnings:
        print(line)
    print(f"wrote {out} ({size / 1024:.0f} KB)")
    return 0


def _validation_line(trained: Trained) -> str:
    """What cross-validation found, and what `--route auto` will do with the router."""
    found = trained.validation
    if found is None:
        return (
            "too few sessions to hold any out, so it is untested: --route auto keeps the heuristic's choices "
            "(train on more sessions)"
        )
    record, n = found.record(), len(found.held)
    threshold = found.min_confidence
    how = "each session held out in turn" if found.method == LEAVE_ONE_OUT else f"{found.folds} folds"
    line = (
        f"cross-validated ({how}), best picks on held-out sessions: "
        f"learned {record['learned_best_picks']}/{n}, heuristic {record['heuristic_best_picks']}/{n}"
    )
    if trained.router.unproven is not None:
        return f"{line}: no better than the heuristic, so --route auto keeps the heuristic's choices"
    if threshold <= 0:
        return f"{line}; --route auto follows it on every prompt"
    if threshold >= 1:
        return f"{line}; --route auto keeps the heuristic's choices (the router never did better where sure)"
    return (
        f"{line}, the two together {record['with_fallback_best_picks']}/{n}: --route auto follows it where it is at "
        f"least {threshold:.0%} sure, the heuristic elsewhere"
    )


def router_eval(args: argparse.Namespace) -> int:
    router, _ = load_router(path_flag(args.router, "router"))
    kind = args.score or router.trained_on.get("score")
    if kind not in SCORE_KINDS:
        kind = None
    found = read_examples(args.sessions, drafters=router.classes, kind=kind)
    kind = score_kind(found.examples, kind)
    cases = evaluate(found.examples, router, kind)
    result = report(cases, kind)
    trained = _seen(router.trained_on, [one.prompt for one in found.examples])
    result["skipped"] = dict(found.skipped)
    result["trained_prompts"] = trained
    result["prompt_format"] = found.prompt_format_line()
    if args.json:
        print(dump_json(result))
        return 0
    for line in _lines(result, Path(args.router).name):
        print(line)
    if line := _confidence_line([c.confidence for c in cases], router.min_confidence, router.unproven is None):
        print(line)
    if router.unproven is not None:
        print(f"--route auto keeps the heuristic's choices with this router: it {router.unproven}")
    print(found.prompt_format_line())
    for line in found.skipped_lines():
        print(line)
    if trained:
        print(f"note: {trained} of these sessions' prompts were among its training prompts: they are not held out")
    return 0


def _confidence_line(confidences: Sequence[float | None], threshold: float, followed: bool) -> str | None:
    """How sure the router was of its picks here, beside the threshold under which auto defers
    (`followed`: where auto follows it at all)."""
    known = sorted(c for c in confidences if c is not None)
    if not known:
        return None
    median = statistics.median(known)
    line = f"its confidence in its picks: median {median:.0%}, lowest {known[0]:.0%}"
    return f"{line}; --route auto defers to the heuristic below {threshold:.0%}" if followed else line


def _sessions(count: int) -> str:
    return counted(count, "session")


def _seen(trained_on: Mapping[str, Any], prompts: list[str]) -> int:
    """How many of `prompts` the router was trained on, by the hashes its file keeps."""
    hashes = trained_on.get("prompt_sha256")
    known = {h for h in hashes if isinstance(h, str)} if isinstance(hashes, list) else set()
    return sum(prompt_hash(p) in known for p in prompts)


def _lines(result: Mapping[str, Any], name: str) -> list[str]:
    unit = result["unit"]
    rows = (
        ("learned", f"learned ({name})"),
        ("heuristic", "heuristic"),
        ("with_fallback", "--route auto (learned, heuristic where unsure)"),
    )
    width = max(24, *(len(title) + 2 for _, title in rows))
    lines = [
        f"{_sessions(result['sessions'])}; best drafter by {unit}; regret: the best drafter's {unit} minus the pick's",
        f"{'':<{width}}{'best picks':>14}{'mean regret':>14}",
    ]
    for key, title in rows:
        lines.append(_row(title, result[key], result["sessions"], width))
    short = {"learned": "learned", "heuristic": "heuristic", "with_fallback": "--route auto"}
    for category, summary in (result["by_category"] or {}).items():
        lines.append(f"{category}:")
        lines += [_row(f"  {short[key]}", summary[key], summary["sessions"], width) for key, _ in rows]
    return lines


def _row(title: str, picks: Mapping[str, Any], sessions: int, width: int) -> str:
    share = f"{picks['best_picks']}/{sessions} ({picks['accuracy']:.0%})"
    deferred = f"   {picks['deferred']} deferred" if "deferred" in picks else ""
    return f"{title:<{width}}{share:>14}{picks['mean_regret']:>14.2f}{deferred}"
