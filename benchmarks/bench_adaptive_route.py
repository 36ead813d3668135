"""Does `--route adaptive` keep up with the best single drafter, and beat `--route auto`? On the
prompt library's mixed and editing prompts: decode tokens/s of each drafter pinned, of auto (the
request router) and of adaptive (a drafter per round), all in this one process, the routes visited
in a new order each repeat; medians over repeats. Beside them an A/A control: adaptive against
adaptive, the noise floor of every ratio here.

    python -m benchmarks.bench_adaptive_route                     # the demo models: base, prose, prompt lookup
    python -m benchmarks.bench_adaptive_route --categories code,prose --repeats 3
    python -m benchmarks.bench_adaptive_route --prompts benchmarks/data/heldout_prompts.jsonl --categories all
    python -m benchmarks.bench_adaptive_route --target smollm2 --prompts benchmarks/data/heldout_prompts.jsonl \
        --categories prose --repeats 2       # SmolLM2's drafters and map (prose to none)
    python -m benchmarks.bench_adaptive_route --prompts specplay/data/routing_heldout.jsonl --categories all \
        --clock cpu                          # issue 60's held-out set, timed by CPU time (a loaded machine)

`--clock cpu` times every route (and adaptive's own choices, which read the run's clock) by this
process's CPU time instead of the wall clock: on a machine other work keeps busy, a run's wall time
swings with what else runs, its CPU time much less (with one OpenBLAS thread, as specplay gives a
small target, it is the work the run did). `--fixed` leaves a fixed route out of the timing (a
drafter known to lose everywhere, to save time); the report says which were timed.

`none` (no speculation) is one more fixed choice: "best fixed" is the fastest of the drafters and
`none`, the best a user could have pinned.

Greedy (every route commits the same text: the ratios are speed alone), k 4 fixed, chat template,
ignore EOS, 128 tokens.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends import open_stream
from specplay.cli import build_parser
from specplay.cli.configure import given, run_config
from specplay.config.demo import DEMO_DIR
from specplay.data.library import library_prompts, read_prompts
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE, SpecSettings


def run_once(engine: SpecEngine, prompt: str, ids: Sequence[int], route: str, max_tokens: int) -> DoneEvent:
    request = Request(prompt, tuple(ids), "speculative", 0, max_tokens, ignore_eos=True)
    settings = SpecSettings(k=4, route=route, policy="fixed")
    events = engine.generate(request, LiveControls(settings, engine.drafters))
    done = [e for e in events if isinstance(e, DoneEvent)]
    return done[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    drafts = [f"base={DEMO_DIR / 'base'}", f"prose={DEMO_DIR / 'prose'}", "lookup=prompt-lookup"]
    parser.add_argument("--target", default="demo")
    parser.add_argument(
        "--draft",
        action="append",
        default=None,
        help="as `specplay --draft` (default: on the demo models "
        + ", ".join(d.split("=")[0] for d in drafts)
        + "; on a catalog target, its own drafters and route map, as `specplay --target NAME` has them)",
    )
    parser.add_argument("--prompts", type=Path, help="a prompt file (JSON Lines); default: the shipped library")
    parser.add_argument("--categories", default="mixed,editing", help="comma-separated, or all")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="what times a run (module docstring)")
    parser.add_argument("--fixed", help="comma-separated fixed routes to time (default: every drafter and none)")
    args = parser.parse_args()

    given_drafts = args.draft or (drafts if args.target == "demo" else [])
    flags = ["run", "--target", args.target, *(f for d in given_drafts for f in ("--draft", d))]
    config = run_config(given(build_parser().parse_args(flags)))
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    if args.clock == "cpu":
        engine.clock = time.process_time
    categories = args.categories.split(",")
    every = read_prompts(args.prompts) if args.prompts else library_prompts()
    prompts = [p for p in every if args.categories == "all" or p.category in categories]
    fixed = args.fixed.split(",") if args.fixed else [*engine.drafters, NONE_ROUTE]
    routes = [*fixed, AUTO_ROUTE, ADAPTIVE_ROUTE]
    ids = {p.name: engine.encode(p.text, raw=False) for p in prompts}
    for p in prompts:  # warm up every model on every prompt's length
        run_once(engine, p.text, ids[p.name], ADAPTIVE_ROUTE, 16)

    tps: dict[tuple[str, str], list[float]] = {(p.name, r): [] for p in prompts for r in routes}
    control: dict[str, list[float]] = {p.name: [] for p in prompts}
    switches: dict[str, list[int]] = {p.name: [] for p in prompts}
    order = random.Random(0)
    for _ in range(args.repeats):
        for p in prompts:
            visit = [*routes, ADAPTIVE_ROUTE]  # adaptive twice: the second run is the A/A control
            order.shuffle(visit)
            seen_adaptive = None
            for route in visit:
                done = run_once(engine, p.text, ids[p.name], route, args.max_tokens)
                speed = float(done.metrics["tokens_per_s"])
                if route == ADAPTIVE_ROUTE and seen_adaptive is not None:
                    control[p.name].append(speed / seen_adaptive)
                    continue
                if route == ADAPTIVE_ROUTE:
                    seen_adaptive = speed
                    switches[p.name].append(done.metrics["route_switches"])
                tps[(p.name, route)].append(speed)

    def med(name: str, route: str) -> float:
        return statistics.median(tps[(name, route)])

    print(f"# --route adaptive against each drafter and auto ({platform.machine()}, {args.target})\n")
    source = args.prompts.name if args.prompts else "the prompt library"
    print(f"{len(prompts)} prompts of {source}; k 4 fixed, greedy, {args.max_tokens} tokens, {args.repeats} repeats;")
    clock = "CPU time of this process" if args.clock == "cpu" else "wall clock"
    print(f"decode tokens/s ({clock}), medians; best fixed: the fastest of {', '.join(fixed)}\n")
    print(
        "| prompt | category | "
        + " | ".join(routes)
        + " | best fixed | adaptive / best | adaptive / auto | switches | A/A range |"
    )
    print("|---" * (len(routes) + 7) + "|")
    worst, wins, near, over_09 = float("inf"), 0, 0, 0
    for p in prompts:
        singles = {r: med(p.name, r) for r in fixed}
        best = max(singles, key=lambda r: singles[r])
        over_best = med(p.name, ADAPTIVE_ROUTE) / singles[best]
        over_auto = med(p.name, ADAPTIVE_ROUTE) / med(p.name, AUTO_ROUTE)
        worst = min(worst, over_best)
        near += over_best >= 0.95
        over_09 += over_best >= 0.9
        wins += p.category == "mixed" and over_auto > 1
        cells = [p.name, p.category, *(f"{med(p.name, r):.1f}" for r in routes), best]
        cells += [f"{over_best:.2f}×", f"{over_auto:.2f}×", f"{statistics.median(switches[p.name]):.0f}"]
        cells.append(f"{min(control[p.name]):.2f}–{max(control[p.name]):.2f}")
        print("| " + " | ".join(cells) + " |")
    mixed = sum(p.category == "mixed" for p in prompts)
    every_control = [c for values in control.values() for c in values]
    print(
        f"\nadaptive over the best fixed choice: worst prompt {worst:.2f}×, at least 0.9× on {over_09} and 0.95× on "
        f"{near} of {len(prompts)}; beats auto on {wins} of {mixed} mixed prompts. A/A control (adaptive / adaptive): "
        f"median {statistics.median(every_control):.3f}, "
        f"range {min(every_control):.3f}–{max(every_control):.3f}"
    )


if __name__ == "__main__":
    main()
