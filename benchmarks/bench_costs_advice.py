"""Does `specplay costs` advise the k a user's own runs measure best? Issue 60's measurement, each
side its own process: one `specplay costs --json` for runs of --max-tokens tokens, then the
speedup measured at each k by `specplay run` processes, a speculative run between two target-only
runs (its tokens/s over the mean of theirs: a machine whose speed drifts moves both sides alike),
the sides alternating T, S, T, S, ... with the k in a new order each repeat, and an A/A control
measured the same way (a target-only run between two others: the noise floor of every ratio here).

    python -m benchmarks.bench_costs_advice                      # the demo models, drafter base
    python -m benchmarks.bench_costs_advice --repeats 3 --ks 3,4,5,6,7,8

Greedy, the code prompt below (raw, no chat template), fixed-k policy, EOS ignored, on both sides.
The criteria (issue 60): the recommended k's measured speedup within 5% of the best measured k's,
and its predicted speedup within 15% of its measured one. OpenBLAS's thread count is pinned for
every process (--threads; 0 lets each choose as it starts, which on a busy machine differs from
one process to the next and moves its speed by a fifth or more).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_costs import PROMPT
from specplay.engine.disturbance import DRIFT_LIMIT, TIMING_DRIFT


def specplay(argv: list[str], env: dict[str, str]) -> dict:
    """One specplay process's JSON (its last stdout line)."""
    done = subprocess.run(
        [sys.executable, "-m", "specplay", *argv], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"specplay {' '.join(argv[:3])} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo")
    parser.add_argument("--route", default="base", help="the drafter measured")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--ks", default="1,2,3,4,5,6,7,8", help="the k measured, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="measured runs per k")
    parser.add_argument("--costs-repeats", type=int, default=9, help="`specplay costs --repeats`")
    parser.add_argument("--threads", type=int, default=1, help="OPENBLAS_NUM_THREADS for every process (0: unset)")
    args = parser.parse_args()

    env = dict(os.environ)
    if args.threads:
        env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        prompt = Path(folder) / "prompt.py"
        prompt.write_text(PROMPT)
        common = ["--target", args.target, "--prompt-file", str(prompt), "--raw", "--temperature", "0"]
        common += ["--max-tokens", str(args.max_tokens), "--ignore-eos"]
        costs = specplay(["costs", *common, "--repeats", str(args.costs_repeats), "--json"], env)
        drafter = costs["drafters"][args.route]
        predicted = {p["k"]: p["speedup"] for p in drafter["predicted_speedup_by_k"]}

        drifts: list[float] = []

        def tokens_per_s(mode: str, k: int) -> float:
            """A run's tokens/s; its lane's timing drift (the run's own "disturbed") is kept."""
            flags = ["--mode", mode] if mode == "target" else ["--route", args.route, "--policy", "fixed"]
            metrics = specplay(["run", *common, *flags, "--k", str(k), "--json"], env)["metrics"]
            drifts.append(metrics[TIMING_DRIFT] or 0.0)
            return float(metrics["tokens_per_s"])

        ks = [int(k) for k in args.ks.split(",")]
        sides = [*ks, 0]  # 0: the A/A control, a target-only run in a speculative run's place
        measured: dict[int, list[float]] = {side: [] for side in sides}
        order = random.Random(0)
        print(f"# {args.target}, drafter {args.route}, {args.max_tokens} tokens, greedy; sides in order:", flush=True)
        for repeat in range(args.repeats):
            order.shuffle(sides)
            before = tokens_per_s("target", 1)
            for side in sides:
                middle = tokens_per_s("target" if side == 0 else "speculative", side or 1)
                after = tokens_per_s("target", 1)
                ratio = middle / ((before + after) / 2)
                measured[side].append(ratio)
                name = "A/A" if side == 0 else f"k {side}"
                print(
                    f"repeat {repeat + 1}: T {before:.1f}  {name} {middle:.1f}  T {after:.1f}  → {ratio:.3f}",
                    flush=True,
                )
                before = after
    minutes = (time.monotonic() - started) / 60

    print(
        f"\n`specplay costs`: target step {costs['target_step_ms']:.2f} ms (drift {costs['target_step_drift']:.0%}), "
        f"acceptance over runs of {costs['acceptance_tokens']} tokens, mean acceptance length by quarter "
        f"{', '.join(f'{a:.2f}' for a in drafter['mean_acceptance_length_by_part'])}; "
        f"{'disturbed: ' + costs['disturbed_reason'] if costs['disturbed'] else 'not disturbed'}; "
        f"OpenBLAS threads {costs['blas_threads']}\n"
    )
    print("| k | predicted | measured, by repeat | measured (median) | predicted / measured |")
    print("|---|---|---|---|---|")
    median = {k: statistics.median(measured[k]) for k in ks}
    for k in ks:
        runs = ", ".join(f"{r:.2f}" for r in measured[k])
        p = predicted.get(k)
        print(f"| {k} | {p:.2f}× | {runs} | {median[k]:.2f}× | {p / median[k]:.2f} |" if p else f"| {k} | - | {runs} |")
    control = measured[0]
    print(f"| A/A | 1.00× | {', '.join(f'{r:.2f}' for r in control)} | {statistics.median(control):.2f}× | |")
    best = max(ks, key=lambda k: median[k])
    recommended = drafter["recommended_k"]
    if recommended is None:
        print(f"\n`costs` recommends the route {drafter['recommended_route']}: no k pays (best k {drafter['best_k']}).")
    elif recommended in median:
        at_best = median[recommended] / median[best]
        against = drafter["recommended_speedup"] / median[recommended]
        near_best = "met" if at_best >= 0.95 else "not met"
        print(
            f"\nrecommended k {recommended} (predicted {drafter['recommended_speedup']:.2f}×, measured "
            f"{median[recommended]:.2f}×: predicted / measured {against:.2f}, target within 0.85–1.15: "
            f"{'met' if 0.85 <= against <= 1.15 else 'not met'}); best measured k {best} ({median[best]:.2f}×): the "
            f"recommended k measured {at_best:.3f} of it (target at least 0.95: {near_best})"
        )
    else:
        print(f"\nrecommended k {recommended} was not among the k measured ({args.ks})")
    busy = sum(d > DRIFT_LIMIT for d in drifts)
    print(
        f"A/A control median {statistics.median(control):.3f}, range {min(control):.3f}–{max(control):.3f}; "
        f"{busy} of {len(drifts)} runs' lanes drifted by more than {DRIFT_LIMIT:.0%} (timing drift median "
        f"{statistics.median(drifts):.0%}); {minutes:.1f} min"
    )


if __name__ == "__main__":
    main()
