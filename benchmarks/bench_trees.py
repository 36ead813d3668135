"""Draft trees against the chain of as many nodes (the same verify rows), measured side by side,
beside an A/A control (the chain against itself) and beside what `specplay costs` predicts of
the ratio (engine/speedup.predict_tree: each shape's acceptance from short runs of it, its costs
from the verify curve and the drafter's times).

    python -m benchmarks.bench_trees                                      # the demo models, drafter base
    python -m benchmarks.bench_trees --target smollm2 --drafter exit --prompts rewrite-pathlib,lighthouse

Greedy (a tree and a chain commit the same text: the ratios are speed alone), the prompt through
the chat template, EOS ignored. Every run of a prompt is made in this one process, the order
shuffled each repeat; decode tokens/s, medians over repeats.
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
from specplay.engine.costs import RoundsMeasured, measure_costs, measure_rounds
from specplay.engine.events import DoneEvent, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings


def run_once(
    engine: SpecEngine, prompt: str, ids: Sequence[int], settings: SpecSettings, max_tokens: int
) -> tuple[float, float]:
    """(decode tokens/s, mean tokens per round) of one greedy run."""
    request = Request(prompt, tuple(ids), "speculative", 0, max_tokens, ignore_eos=True)
    events = list(engine.generate(request, LiveControls(settings, engine.drafters)))
    done = [e for e in events if isinstance(e, DoneEvent)][-1]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    return float(done.metrics["tokens_per_s"]), sum(len(r.tokens) for r in rounds) / len(rounds)


def rounds_of(
    engine: SpecEngine, ids: Sequence[int], settings: SpecSettings, args: argparse.Namespace, step_ms: float
) -> RoundsMeasured:
    """What `costs` measures of a shape: its rounds on the prompt (a tree: `settings`' width, k nodes)."""
    return measure_rounds(
        engine,
        ids,
        settings,
        args.drafter,
        k=settings.k,
        max_tokens=args.max_tokens,
        ignore_eos=True,
        target_step_ms=step_ms,
        width=settings.width,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo")
    parser.add_argument("--draft", action="append", default=None, help="as `specplay --draft` (default: the set's)")
    parser.add_argument("--drafter", default="base", help="the drafter every run routes to (default base)")
    parser.add_argument("--prompts", default="fibonacci,rewrite-pathlib,lighthouse", help="library prompt names")
    parser.add_argument("--nodes", default="4,6,8", help="node budgets: each tree beside the chain of as many")
    parser.add_argument("--widths", default="2,3")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    flags = ["run", "--target", args.target, *(f for d in args.draft or () for f in ("--draft", d))]
    config = run_config(given(build_parser().parse_args(flags)))
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    names = args.prompts.split(",")
    prompts = [p for p in library_prompts() if p.name in names]
    nodes = [int(n) for n in args.nodes.split(",")]
    widths = [int(w) for w in args.widths.split(",")]
    chain = {n: SpecSettings(k=n, route=args.drafter) for n in nodes}
    trees = {(w, n): SpecSettings(k=n, route=args.drafter, width=w, tree_nodes=n) for w in widths for n in nodes}
    runs = {("chain", n): s for n, s in chain.items()} | {("tree", w, n): s for (w, n), s in trees.items()}
    ids = {p.name: engine.encode(p.text, raw=False) for p in prompts}

    predicted: dict[tuple[str, int, int], float] = {}
    for p in prompts:
        for settings in runs.values():  # warm up every shape on every prompt
            run_once(engine, p.text, ids[p.name], settings, 16)
        costs = measure_costs(engine, ids[p.name], chain[nodes[0]].sampling, chain[nodes[0]].acceptance_rule)
        curve, step_ms = costs.verify_curve_ms(), costs.target_step_ms.ms

        by_k = rounds_of(engine, ids[p.name], chain[max(nodes)], args, step_ms).predict(
            curve, costs.draft_step_ms[args.drafter].ms, step_ms, max(nodes), draft_call_ms=costs.call_ms(args.drafter)
        )
        for n in nodes:
            chain_n = next(k for k in by_k if k.k == n)
            for w in widths:
                measured = rounds_of(engine, ids[p.name], trees[(w, n)], args, step_ms)
                tree = measured.predict_tree(chain_n, w, curve, step_ms)
                if tree is not None:
                    predicted[(p.name, w, n)] = tree.vs_chain

    speed: dict[tuple[str, object], list[float]] = {}
    tokens: dict[tuple[str, object], list[float]] = {}
    control: list[float] = []
    order = random.Random(0)
    for _ in range(args.repeats):
        for p in prompts:
            visit = [*runs, ("control", nodes[-1])]  # the longest chain twice: the A/A control
            order.shuffle(visit)
            for key in visit:
                settings = chain[nodes[-1]] if key[0] == "control" else runs[key]
                tps, per_round = run_once(engine, p.text, ids[p.name], settings, args.max_tokens)
                speed.setdefault((p.name, key), []).append(tps)
                tokens.setdefault((p.name, key), []).append(per_round)
            control.append(speed[(p.name, ("control", nodes[-1]))][-1] / speed[(p.name, ("chain", nodes[-1]))][-1])

    def med(name: str, key: object) -> float:
        return statistics.median(speed[(name, key)])

    print(f"# draft trees against the chain of as many nodes ({platform.machine()}, {args.target}, {args.drafter})\n")
    print(f"greedy, {args.max_tokens} tokens, {args.repeats} repeats; decode tokens/s, medians\n")
    print("| prompt | nodes | chain tok/s (tokens a round) | width | tree tok/s (tokens a round) ", end="")
    print("| tree / chain | predicted |")
    print("|---|---|---|---|---|---|---|")
    errors = []
    for p in prompts:
        for n in nodes:
            chain_tps = med(p.name, ("chain", n))
            chain_tokens = statistics.median(tokens[(p.name, ("chain", n))])
            for w in widths:
                tree_tps = med(p.name, ("tree", w, n))
                ratio = tree_tps / chain_tps
                forecast = predicted.get((p.name, w, n))
                if forecast is not None:
                    errors.append(forecast / ratio - 1)
                shown = f"{forecast:.2f}×" if forecast is not None else "–"
                per_round = statistics.median(tokens[(p.name, ("tree", w, n))])
                print(
                    f"| {p.name} | {n} | {chain_tps:.1f} ({chain_tokens:.2f}) | {w} | {tree_tps:.1f} ({per_round:.2f}) "
                    f"| {ratio:.2f}× | {shown} |"
                )
    print(
        f"\nA/A control (chain of {nodes[-1]} / itself): median {statistics.median(control):.3f}, "
        f"range {min(control):.3f}–{max(control):.3f}"
    )
    if errors:
        worst = max(errors, key=abs)
        print(
            f"costs' predicted ratio against the measured: median error {statistics.median(errors):+.1%}, "
            f"worst {worst:+.1%}"
        )


if __name__ == "__main__":
    main()
