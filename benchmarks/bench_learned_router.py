"""Does a router trained on counterfactual sessions pick the best drafter more often than the
heuristic? Every prompt of the shipped library is run once on the demo models with drafters
`base`, `prose` and `lookup` (prompt lookup), routed by the heuristic (`--route auto`) with
counterfactual routes on, and saved as a session (each records its prompt's category and name).
A router is trained (`specplay router train`) on half of the prompts, alternate prompts within
each category in library order (the 1st, 3rd, 5th... of each), and evaluated (`specplay router
eval`) on the other half beside the heuristic: how often each picks the best drafter, and its mean
regret. Twice: with the best drafter by speed (tokens per second, the default where sessions are
timed), then by mean acceptance length (`--score acceptance`).

With `--heldout FILE` the router trains on every library prompt and is evaluated on FILE's prompts,
none of which the router or the heuristic was tuned on (benchmarks/data/heldout_prompts.jsonl:
written for this, kept out of the library and the router's test prompts; specplay/data/
routing_heldout.jsonl: mixed code and prose, long copy-heavy edits, short chat). The held-out
prompts run twice, A and B: both routers are evaluated on each, and the A/A control is how often
run A's best drafter is run B's best too, the most any router can agree with labels that noisy.
`--train N` trains on N library prompts only, taken by turns from each category in library order
(8: the first two of each), as a user with a few sessions would. The summary table sets beside
each router's held-out best picks what `--route auto` picks with it: the learned router's pick only
where its cross-validated picks beat the heuristic's on its training sessions (and it is sure
enough), the heuristic's elsewhere.

    python -m benchmarks.bench_learned_router                      # runs the prompts, then trains and evaluates
    python -m benchmarks.bench_learned_router --sessions DIR       # reuses DIR's sessions where it holds them
    python -m benchmarks.bench_learned_router --heldout benchmarks/data/heldout_prompts.jsonl
    python -m benchmarks.bench_learned_router --heldout specplay/data/routing_heldout.jsonl --train 8

Greedy, 128 tokens (EOS ignored), the chat template (as `specplay run`), k 4, fixed policy, seed 0.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends import open_stream
from specplay.cli import build_parser
from specplay.cli import main as specplay_main
from specplay.cli.configure import given, run_config
from specplay.config.demo import demo_model_paths
from specplay.data.library import Prompt, library_prompts, read_prompts
from specplay.engine.request import Request
from specplay.router_training.evaluate import evaluate, summary
from specplay.router_training.examples import read_examples
from specplay.router_training.router_file import load_router
from specplay.router_training.scores import SCORE_KINDS, UNITS, ScoreKind
from specplay.runner.session_run import run_sample
from specplay.store import list_session_files, load_session

DEFAULT_DIR = Path("sessions") / "routing-bench"


def split(prompts: list[Prompt]) -> tuple[list[Prompt], list[Prompt]]:
    """(train, evaluate): within each category, in library order, the 1st, 3rd, 5th... prompt
    trains and the 2nd, 4th, 6th... is held out."""
    seen: dict[str, int] = defaultdict(int)
    train, held_out = [], []
    for prompt in prompts:
        (train if seen[prompt.category] % 2 == 0 else held_out).append(prompt)
        seen[prompt.category] += 1
    return train, held_out


def by_turns(prompts: list[Prompt], n: int) -> list[Prompt]:
    """`n` prompts taken by turns from each category (categories in order of first appearance,
    each category's prompts in library order)."""
    groups: dict[str, list[Prompt]] = defaultdict(list)
    for prompt in prompts:
        groups[prompt.category].append(prompt)
    taken: list[Prompt] = []
    for turn in range(max(map(len, groups.values()), default=0)):
        taken += [group[turn] for group in groups.values() if turn < len(group)]
    return taken[:n]


def run_prompts(directory: Path, prompts: list[Prompt], max_tokens: int) -> None:
    """Each prompt once, heuristic-routed with counterfactual routes, saved in `directory`."""
    _, drafters = demo_model_paths()
    argv = ["run", "--target", "demo", "--draft", f"base={drafters['base']}", "--draft", f"prose={drafters['prose']}"]
    argv += ["--draft", "lookup=prompt-lookup", "--counterfactual", "--route", "auto", "--temperature", "0"]
    argv += ["--max-tokens", str(max_tokens), "--ignore-eos", "--sessions-dir", str(directory)]
    config = run_config(given(build_parser().parse_args([*argv, "--prompt", "-"])))
    source = open_stream(config)
    try:
        identity = source.describe()
        for i, prompt in enumerate(prompts, 1):
            ids = tuple(source.encode(prompt.text, raw=False))
            request = Request(prompt.text, ids, "speculative", 0, max_tokens, ignore_eos=True)
            began = time.perf_counter()
            run_sample(
                source,
                config,
                request,
                on_event=lambda lane, event: None,
                save=True,
                baseline=False,
                identity=identity,
                about={"category": prompt.category, "prompt_name": prompt.name},
            )
            print(
                f"  {i}/{len(prompts)} {prompt.category}/{prompt.name}: {time.perf_counter() - began:.1f} s", flush=True
            )
    finally:
        source.close()


def sessions_by_name(directory: Path) -> dict[str, Path]:
    """The sessions in `directory` by the prompt name their request records."""
    found = {}
    for path in list_session_files(directory):
        name = (load_session(path).header.get("request") or {}).get("prompt_name")
        if isinstance(name, str):
            found[name] = path
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=Path, default=DEFAULT_DIR, help=f"session folder (default {DEFAULT_DIR})")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--heldout", type=Path, help="train on the whole library, evaluate on this prompt file")
    parser.add_argument("--train", type=int, help="with --heldout, train on this many library prompts (by turns)")
    args = parser.parse_args()

    library = library_prompts()
    if args.train and args.heldout:
        library = by_turns(library, args.train)
    heldout = read_prompts(args.heldout) if args.heldout else []
    names, texts = {p.name for p in library}, {p.text for p in library}
    overlap = {p.name for p in heldout if p.name in names or p.text in texts}
    if overlap:
        print(f"the held-out prompts must not be library prompts: {', '.join(sorted(overlap))[:200]}")
        return 2
    prompts = [*library, *heldout]
    print(f"specplay learned router vs heuristic; {platform.platform()}, {platform.python_version()}")
    have = ensure_sessions(args.sessions, prompts, args.max_tokens)
    again = ensure_sessions(args.sessions / "again", heldout, args.max_tokens) if heldout else {}
    train, held_out = (library, heldout) if heldout else split(library)
    print(f"train on {len(train)} prompts: {', '.join(p.name for p in train)}")
    print(f"evaluate on {len(held_out)} prompts: {', '.join(p.name for p in held_out)}", flush=True)
    rows = []
    suffix = f"-{len(train)}" if args.train else ""
    for score, name in (([], f"router{suffix}.json"), (["--score", "acceptance"], f"router{suffix}-acceptance.json")):
        router = args.sessions / name
        print(f"\n$ specplay router train TRAIN_SESSIONS --out {router} {' '.join(score)}".rstrip(), flush=True)
        code = specplay_main(["router", "train", *(str(have[p.name]) for p in train), "--out", str(router), *score])
        if code:
            return code
        for runs, sessions in (("", have), (" (run B)", again)):
            if not sessions:
                continue
            print(f"\n$ specplay router eval HELD_OUT_SESSIONS{runs} --router {router}", flush=True)
            paths = [str(sessions[p.name]) for p in held_out]
            code = specplay_main(["router", "eval", *paths, "--router", str(router)])
            if code:
                return code
        runs = [have, again] if again else [have]
        rows.append(summary_row(router, [[str(r[p.name]) for p in held_out] for r in runs]))
    run_b = " run B |" if again else ""
    print(
        f"\n| best drafter by | cross-validated on its {len(train)} sessions: learned / heuristic | auto follows it "
        f"| held out, run A: learned / heuristic / `--route auto` |{run_b}"
    )
    print("|---" * (5 if again else 4) + "|")
    for row in rows:
        print(row)
    if again:
        print("\nA/A control: run A's best drafter is run B's best too (ties count where they meet), held-out prompts")
        for kind in SCORE_KINDS:
            first = read_examples([str(have[p.name]) for p in held_out], kind=kind).examples
            second = read_examples([str(again[p.name]) for p in held_out], kind=kind).examples
            pairs = zip(first, second, strict=True)
            agree = sum(bool(set(a.scores.best(kind)) & set(b.scores.best(kind))) for a, b in pairs)
            print(f"  by {UNITS[kind]}: {agree}/{len(first)}")
    return 0


def summary_row(router_path: Path, runs: list[list[str]]) -> str:
    """One table row: the router's cross-validation and verdict, and each run's held-out best picks."""
    router, _ = load_router(router_path)
    kind: ScoreKind = router.trained_on.get("score", "speed")
    found = router.trained_on.get("cross_validation") or {}
    n = found.get("sessions", "?")
    validated = f"{found.get('learned_best_picks', '?')}/{n} / {found.get('heuristic_best_picks', '?')}/{n}"
    follows = "yes" if router.unproven is None else "no"
    cells = []
    for paths in runs:
        picks = summary(evaluate(read_examples(paths, drafters=router.classes, kind=kind).examples, router, kind))
        m = picks["sessions"]
        chosen = (picks["learned"], picks["heuristic"], picks["with_fallback"])
        cells.append(" / ".join(f"{c['best_picks']}/{m}" for c in chosen))
    return f"| {UNITS[kind]} | {validated} | {follows} | " + " | ".join(cells) + " |"


def ensure_sessions(directory: Path, prompts: list[Prompt], max_tokens: int) -> dict[str, Path]:
    """The sessions of `prompts` in `directory` by prompt name, running those it lacks."""
    have = sessions_by_name(directory)
    missing = [p for p in prompts if p.name not in have]
    if missing:
        print(f"running {len(missing)} prompts into {directory} (reusing {len(prompts) - len(missing)})", flush=True)
        run_prompts(directory, missing, max_tokens)
        return sessions_by_name(directory)
    print(f"reusing the {len(prompts)} sessions in {directory}")
    return have


if __name__ == "__main__":
    sys.exit(main())
