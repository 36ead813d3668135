"""Does `--policy cost` keep up with the best fixed k? Decode tokens/s of every fixed k, of no
speculation (route none) and of the cost policy, on each prompt, all in this one process, visited
in a new order each repeat; medians over repeats. Beside them an A/A control: the cost policy
against itself, the noise floor of every ratio here.

    python -m benchmarks.bench_cost_policy                                   # the demo models, auto route
    python -m benchmarks.bench_cost_policy --target smollm2 --draft lookup=prompt-lookup --prompts rewrite-pathlib

Greedy (every choice commits the same text: the ratios are speed alone), the prompt through the
chat template, EOS ignored, 128 tokens; the cost policy starts at k 4 with k_max 8.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
from collections.abc import Sequence

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends import open_stream
from specplay.cli import build_parser
from specplay.cli.configure import given, run_config
from specplay.data.library import library_prompts
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import NONE_ROUTE, SpecSettings

COST = "cost"
"""The cost policy's column; the fixed ks' columns are their k."""


def run_once(engine: SpecEngine, prompt: str, ids: Sequence[int], choice: str, route: str, max_tokens: int) -> float:
    """Decode tokens/s of one run: `choice` is a fixed k, `none`, or the cost policy."""
    request = Request(prompt, tuple(ids), "speculative", 0, max_tokens, ignore_eos=True)
    if choice == COST:
        settings = SpecSettings(k=4, route=route, policy="cost")
    elif choice == NONE_ROUTE:
        settings = SpecSettings(route=NONE_ROUTE)
    else:
        settings = SpecSettings(k=int(choice), route=route, policy="fixed")
    events = engine.generate(request, LiveControls(settings, engine.drafters))
    done = [e for e in events if isinstance(e, DoneEvent)][-1]
    return float(done.metrics["tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo")
    parser.add_argument("--draft", action="append", default=None, help="as `specplay --draft` (default: the set's)")
    parser.add_argument("--route", default="auto", help="the route every run takes (default auto)")
    parser.add_argument(
        "--prompts",
        default="rewrite-pathlib,fibonacci,lighthouse,sky-blue",
        help="library prompt names, comma-separated",
    )
    parser.add_argument("--ks", default="1,2,3,4,5,6,8")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    flags = ["run", "--target", args.target, *(f for d in args.draft or () for f in ("--draft", d))]
    config = run_config(given(build_parser().parse_args(flags)))
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    names = args.prompts.split(",")
    prompts = [p for p in library_prompts() if p.name in names]
    choices = [*args.ks.split(","), NONE_ROUTE, COST]
    ids = {p.name: engine.encode(p.text, raw=False) for p in prompts}
    for p in prompts:  # warm up every model on every prompt's length, at every choice's shapes
        for choice in choices:
            run_once(engine, p.text, ids[p.name], choice, args.route, 16)

    tps: dict[tuple[str, str], list[float]] = {(p.name, c): [] for p in prompts for c in choices}
    control: dict[str, list[float]] = {p.name: [] for p in prompts}
    order = random.Random(0)
    for _ in range(args.repeats):
        for p in prompts:
            visit = [*choices, COST]  # the cost policy twice: the second run is the A/A control
            order.shuffle(visit)
            first_cost = None
            for choice in visit:
                speed = run_once(engine, p.text, ids[p.name], choice, args.route, args.max_tokens)
                if choice == COST and first_cost is not None:
                    control[p.name].append(speed / first_cost)
                    continue
                if choice == COST:
                    first_cost = speed
                tps[(p.name, choice)].append(speed)

    def med(name: str, choice: str) -> float:
        return statistics.median(tps[(name, choice)])

    print(f"# --policy cost against every fixed k ({platform.machine()}, {args.target}, route {args.route})\n")
    print(f"greedy, {args.max_tokens} tokens, {args.repeats} repeats; decode tokens/s, medians\n")
    columns = [f"k {c}" if c.isdigit() else c for c in choices]
    tail = ["best fixed", "cost / best k", "cost / best (none too)", "A/A range"]
    print("| prompt | " + " | ".join([*columns, *tail]) + " |")
    print("|---" * (len(choices) + 5) + "|")
    ratios = []
    for p in prompts:
        fixed = {c: med(p.name, c) for c in choices if c.isdigit()}
        best_k = max(fixed, key=lambda c: fixed[c])
        best_any = max(fixed[best_k], med(p.name, NONE_ROUTE))
        over_k = med(p.name, COST) / fixed[best_k]
        ratios.append(over_k)
        cells = [p.name, *(f"{med(p.name, c):.1f}" for c in choices), f"k {best_k}"]
        cells += [f"{over_k:.2f}×", f"{med(p.name, COST) / best_any:.2f}×"]
        cells.append(f"{min(control[p.name]):.2f}–{max(control[p.name]):.2f}")
        print("| " + " | ".join(cells) + " |")
    every_control = [c for values in control.values() for c in values]
    print(
        f"\ncost policy over the best fixed k: worst prompt {min(ratios):.2f}×, "
        f"median {statistics.median(ratios):.2f}×. "
        f"A/A control (cost / cost): median {statistics.median(every_control):.3f}, "
        f"range {min(every_control):.3f}–{max(every_control):.3f}"
    )


if __name__ == "__main__":
    main()
