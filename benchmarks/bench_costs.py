"""Does `specplay costs` pick the k to set? For one target and drafter: the round costs and the
acceptance `specplay costs` measures and its predicted speedup at each k, against the speedup
measured at each k = 1..K (speculative and target-only runs alternated in this one process, the
k visited in a new order each repeat; medians over repeats), beside an A/A control (target-only
against target-only, the noise floor of every ratio here).

    python -m benchmarks.bench_costs                                  # the demo models, drafter base
    python -m benchmarks.bench_costs --target smollm2 --draft self=smollm2 --draft lookup=prompt-lookup --route lookup

(Prompt lookup drafts only what it finds to copy: a model drafter beside it, here the target
itself, lets the verify pass be timed at every row count.)

Greedy, the code prompt below (raw, no chat template), fixed-k policy, ignore EOS.
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
from specplay.engine.controls import LiveControls
from specplay.engine.costs import RoundsMeasured, measure_costs
from specplay.engine.events import DoneEvent, RoundEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.speedup import recommended_k

PROMPT = '''def read_lines(path, encoding="utf-8"):
    """Return the lines of a file, without their line endings."""
    with open(path, encoding=encoding) as f:
        return [line.rstrip("\\n") for line in f]


def count_words(path):
    """Return how many words each line of a file holds."""
'''


def tokens_per_s(engine: SpecEngine, ids: Sequence[int], mode: str, k: int, route: str, max_tokens: int) -> float:
    from specplay.engine.settings import SpecSettings

    settings = SpecSettings(k=k, route=route, policy="fixed")
    request = Request(PROMPT, tuple(ids), mode, 0, max_tokens, ignore_eos=True)  # type: ignore[arg-type]
    done = [e for e in engine.generate(request, LiveControls(settings, engine.drafters)) if isinstance(e, DoneEvent)]
    return float(done[-1].metrics["tokens_per_s"])


def acceptance(engine: SpecEngine, ids: Sequence[int], route: str, k_max: int, max_tokens: int) -> RoundsMeasured:
    from specplay.engine.settings import SpecSettings

    settings = SpecSettings(k=k_max, route=route, policy="fixed")
    request = Request(PROMPT, tuple(ids), "speculative", 0, max_tokens, ignore_eos=True)
    events = engine.generate(request, LiveControls(settings, engine.drafters))
    return RoundsMeasured.of_rounds(
        e for e in events if isinstance(e, RoundEvent) and e.token_index + k_max <= max_tokens
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo")
    parser.add_argument("--draft", action="append", default=None, help="as `specplay --draft` (default: demo's)")
    parser.add_argument("--route", default="base", help="the drafter to measure")
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    flags = ["costs", "--target", args.target, *(f for d in args.draft or () for f in ("--draft", d))]
    config = run_config(given(build_parser().parse_args([*flags, "--prompt", PROMPT, "--raw"])))
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    ids = engine.encode(PROMPT, raw=True)
    settings = config.settings
    rows = args.k_max + 1
    costs = measure_costs(engine, ids, settings.sampling, settings.acceptance_rule, max_rows=rows)
    measured_run = acceptance(engine, ids, args.route, args.k_max, args.max_tokens)
    per_position = measured_run.acceptance_per_position
    verify = {n: t.ms for n, t in costs.verify_ms.items()}
    target_ms = costs.target_step_ms.ms
    alone_ms, alone_call_ms = costs.draft_step_ms[args.route].ms, costs.call_ms(args.route)
    draft_ms, call_ms = measured_run.draft_costs(alone_ms, alone_call_ms)  # what the prediction uses
    by_k = measured_run.predict(verify, alone_ms, target_ms, args.k_max, draft_call_ms=alone_call_ms)
    predicted = {p.k: p for p in by_k}

    ks = list(range(1, args.k_max + 1))
    measured: dict[int, list[float]] = {k: [] for k in ks}
    control: list[float] = []
    order = random.Random(0)
    for _ in range(args.repeats):
        order.shuffle(ks)
        for k in ks:  # each speculative run beside a target-only run, which side first alternating
            spec_first = k % 2 == 0
            runs = ["speculative", "target"] if spec_first else ["target", "speculative"]
            tps = {mode: tokens_per_s(engine, ids, mode, k, args.route, args.max_tokens) for mode in runs}
            measured[k].append(tps["speculative"] / tps["target"])
        a = tokens_per_s(engine, ids, "target", 1, args.route, args.max_tokens)
        b = tokens_per_s(engine, ids, "target", 1, args.route, args.max_tokens)
        control.append(a / b)

    print(f"# specplay costs against measured speedups ({platform.machine()}, {args.target}, drafter {args.route})\n")
    print(
        f"target step {target_ms:.2f} ms; drafter step {draft_ms:.2f} ms and {call_ms:.2f} ms a draft; "
        f"host {measured_run.host_ms:.2f} ms a round; "
        f"acceptance by position {' '.join(f'{a:.2f}' for a in per_position)}; rounds drafting at least i "
        f"{' '.join(f'{a:.2f}' for a in measured_run.drafted_share)}; {args.max_tokens} tokens, greedy, "
        f"{args.repeats} repeats\n"
    )
    print("| k | verify (target steps) | predicted | measured (median) | measured range | predicted / measured |")
    print("|---|---|---|---|---|---|")
    for k in sorted(measured):
        m = statistics.median(measured[k])
        if k not in predicted:  # its verify pass was not timed (a drafter that drafted less)
            print(f"| {k} | – | – | {m:.2f}× | {min(measured[k]):.2f}–{max(measured[k]):.2f} | – |")
            continue
        p = predicted[k].speedup
        steps = verify[k + 1] / costs.target_step_ms.ms
        print(
            f"| {k} | {steps:.2f} | {p:.2f}× | {m:.2f}× | {min(measured[k]):.2f}–{max(measured[k]):.2f} | {p / m:.2f} |"
        )
    best_measured = max(measured, key=lambda k: statistics.median(measured[k]))
    best = recommended_k(list(predicted.values()))
    assert best is not None
    at_recommended = statistics.median(measured[best.k]) / statistics.median(measured[best_measured])
    print(
        f"\nrecommended k {best.k} (predicted {best.speedup:.2f}×); best measured k {best_measured} "
        f"({statistics.median(measured[best_measured]):.2f}×); the recommended k's measured speedup is "
        f"{at_recommended:.3f} of the best's. A/A control (target-only / target-only): median "
        f"{statistics.median(control):.3f}, range {min(control):.3f}–{max(control):.3f}"
    )


if __name__ == "__main__":
    main()
