"""Does `specplay costs` pick the k to set? For one target and drafter: the round costs and the
acceptance `specplay costs` measures and its predicted speedup at each k, against the speedup
measured at each k = 1..K (each speculative run between two target-only runs, its speedup taken
over their mean time, so a machine whose speed drifts moves both sides alike; the k visited in a
new order each repeat; medians over repeats), beside an A/A control measured the same way (a
target-only run between two others: the noise floor of every ratio here).

    python -m benchmarks.bench_costs                                  # the demo models, drafter base
    python -m benchmarks.bench_costs --target smollm2 --draft lookup=prompt-lookup --route lookup

Greedy, the code prompt below (raw, no chat template), fixed-k policy, ignore EOS. The costs are
measured as `specplay costs` measures them (`--costs-repeats` passes), and the run that measures
acceptance (and, with a second at k 1, the drafter's cost in rounds) is taken over the target step
beside it, as `specplay costs` takes it.

The last two columns are the playground's prediction, which has a lane's rounds at one k only
(here the run at K): its drafting split with the drafter's step timed alone (before "Measure round
costs" measured rounds at two k), and with the step the line through the two runs gives (after).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
from collections.abc import Sequence
from dataclasses import replace

from specplay.backends.mlx import blas  # (OpenBLAS before mlx.core)

# isort: split
from specplay.backends import open_stream
from specplay.cli import build_parser
from specplay.cli.configure import given, run_config
from specplay.engine.costs import REPEATS, disturbance, measure_costs, measure_drafter, predict_drafter
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings

PROMPT = '''def read_lines(path, encoding="utf-8"):
    """Return the lines of a file, without their line endings."""
    with open(path, encoding=encoding) as f:
        return [line.rstrip("\\n") for line in f]


def count_words(path):
    """Return how many words each line of a file holds."""
'''


def seconds(engine: SpecEngine, ids: Sequence[int], mode: str, k: int, route: str, max_tokens: int) -> float:
    """A run's time per token as tokens/s counts it (after the first delivery)."""
    settings = SpecSettings(k=k, route=route, policy="fixed")
    request = Request(PROMPT, tuple(ids), mode, 0, max_tokens, ignore_eos=True)  # type: ignore[arg-type]
    done = [e for e in engine.generate(request, LiveControls(settings, engine.drafters)) if isinstance(e, DoneEvent)]
    return 1 / float(done[-1].metrics["tokens_per_s"])


def between_target_runs(
    engine: SpecEngine, ids: Sequence[int], mode: str, k: int, route: str, max_tokens: int
) -> float:
    """A run's speedup over the mean of a target-only run before it and one after: a drift of the
    machine's speed over the three moves both sides alike."""
    before = seconds(engine, ids, "target", 1, route, max_tokens)
    middle = seconds(engine, ids, mode, k, route, max_tokens)
    after = seconds(engine, ids, "target", 1, route, max_tokens)
    return (before + after) / 2 / middle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo")
    parser.add_argument("--draft", action="append", default=None, help="as `specplay --draft` (default: demo's)")
    parser.add_argument("--route", default="base", help="the drafter to measure")
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="tokens of each measured run, and of the acceptance run"
    )
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per k")
    parser.add_argument("--costs-repeats", type=int, default=REPEATS, help="`specplay costs --repeats`")
    args = parser.parse_args()

    flags = ["costs", "--target", args.target, *(f for d in args.draft or () for f in ("--draft", d))]
    config = run_config(given(build_parser().parse_args([*flags, "--prompt", PROMPT, "--raw"])))
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    ids = engine.encode(PROMPT, raw=True)
    settings = config.settings
    costs = measure_costs(
        engine, ids, settings.sampling, settings.acceptance_rule, max_rows=args.k_max + 1, repeats=args.costs_repeats
    )
    target_ms = costs.target_step_ms.ms
    measured_run = measure_drafter(
        engine,
        ids,
        settings,
        args.route,
        k=args.k_max,
        max_tokens=args.max_tokens,
        ignore_eos=True,
        target_step_ms=target_ms,
    )
    per_position = measured_run.acceptance_per_position
    alone_ms, alone_call_ms = costs.draft_step_ms[args.route].ms, costs.call_ms(args.route)
    draft_ms, call_ms = measured_run.draft_costs(alone_ms, alone_call_ms)  # what the prediction uses
    prediction = predict_drafter(costs, args.route, measured_run, args.k_max)
    predicted = {p.k: p for p in prediction.by_k}
    # The playground's: a lane's rounds at one k, a drafted token priced alone or by the line.
    one_k = replace(measured_run, draft_line_ms=None)
    verify = costs.verify_curve_ms()
    in_rounds_ms = measured_run.draft_line_ms[0] if measured_run.draft_line_ms else alone_ms
    lane = {
        way: {
            p.k: p.speedup for p in one_k.predict(verify, step_ms, target_ms, args.k_max, draft_call_ms=alone_call_ms)
        }
        for way, step_ms in (("alone", alone_ms), ("in rounds", in_rounds_ms))
    }
    reason = disturbance(costs, [prediction])

    ks = list(range(1, args.k_max + 1))
    measured: dict[int, list[float]] = {k: [] for k in ks}
    control: list[float] = []
    order = random.Random(0)
    for _ in range(args.repeats):
        order.shuffle(ks)
        for k in ks:
            measured[k].append(between_target_runs(engine, ids, "speculative", k, args.route, args.max_tokens))
        control.append(between_target_runs(engine, ids, "target", 1, args.route, args.max_tokens))

    print(f"# specplay costs against measured speedups ({platform.machine()}, {args.target}, drafter {args.route})\n")
    print(
        f"target step {target_ms:.2f} ms (drift {costs.target_drift():.0%}); drafter step {draft_ms:.2f} ms and "
        f"{call_ms:.2f} ms a draft; host {measured_run.host_ms:.2f} ms a round; "
        f"acceptance by position {' '.join(f'{a:.2f}' for a in per_position)}; rounds drafting at least i "
        f"{' '.join(f'{a:.2f}' for a in measured_run.drafted_share)}; {args.max_tokens} tokens, greedy, "
        f"{args.repeats} repeats, costs over {args.costs_repeats} passes; OpenBLAS threads {blas.THREADS_CHOSEN}\n"
    )
    print(
        "| k | verify (target steps) | predicted | over the passes | measured (median) | measured range "
        "| predicted / measured | one k, step alone / measured | one k, step in rounds / measured |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for k in sorted(measured):
        m = statistics.median(measured[k])
        p = predicted[k].speedup
        low, high = prediction.speedup_range(k) or (p, p)
        steps = verify[k + 1] / target_ms
        print(
            f"| {k} | {steps:.2f} | {p:.2f}× | {low:.2f}–{high:.2f} | {m:.2f}× | "
            f"{min(measured[k]):.2f}–{max(measured[k]):.2f} | {p / m:.2f} | {lane['alone'][k] / m:.2f} | "
            f"{lane['in rounds'][k] / m:.2f} |"
        )
    best_measured = max(measured, key=lambda k: statistics.median(measured[k]))
    best = prediction.best
    assert best is not None
    at_best = statistics.median(measured[best.k]) / statistics.median(measured[best_measured])
    against_measured = best.speedup / statistics.median(measured[best.k])
    print(
        f"\nrecommended k {best.k} (predicted {best.speedup:.2f}×, {against_measured:.2f} of its measured); best "
        f"measured k {best_measured} ({statistics.median(measured[best_measured]):.2f}×); the recommended k's "
        f"measured speedup is {at_best:.3f} of the best's. A/A control (a target-only run over the two beside "
        f"it): median {statistics.median(control):.3f}, range {min(control):.3f}–{max(control):.3f}. "
        f"{'disturbed: ' + reason if reason else 'not disturbed'}. One k: the drafter's step {alone_ms:.2f} ms "
        f"alone, {in_rounds_ms:.2f} ms in rounds."
    )


if __name__ == "__main__":
    main()
