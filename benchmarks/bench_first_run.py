"""Does a user's first run pay? The models and settings a run takes with no flags (SmolLM2 once
fetched, else the demo models; `--route auto`, k 4 fixed, greedy, the chat template) against
target-only, on library prompts of each class: decode tokens/s of both, each speculative run
between two target-only runs and set against their mean, medians over repeats. Beside them an A/A
control: the second target-only run against the first, the noise floor of every ratio here.

    python -m benchmarks.bench_first_run
    python -m benchmarks.bench_first_run --prompts lighthouse,history-printing,rewrite-pathlib --repeats 5

As the first run does, a run stops at EOS (the target's greedy text, the same on both sides) or
at 256 tokens; `--ignore-eos` runs every request to `--max-tokens`. Where auto sends each prompt,
and why, is printed beside it.
"""

from __future__ import annotations

import argparse
import platform
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
from specplay.engine.settings import Mode, SpecSettings


def run_once(
    engine: SpecEngine, prompt: str, ids: Sequence[int], mode: Mode, max_tokens: int, ignore_eos: bool
) -> float:
    request = Request(prompt, tuple(ids), mode, 0, max_tokens, ignore_eos=ignore_eos)
    drafters = engine.drafters if mode != "target" else ()
    events = engine.generate(request, LiveControls(SpecSettings(), drafters))
    done = [e for e in events if isinstance(e, DoneEvent)][-1]
    return float(done.metrics["tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="lighthouse,history-printing,fable,rewrite-pathlib,fibonacci")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    config = run_config(given(build_parser().parse_args(["run"])))  # no model flags: the default set
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    names = args.prompts.split(",")
    prompts = [p for p in library_prompts() if p.name in names]
    ids = {p.name: engine.encode(p.text, raw=False) for p in prompts}
    for p in prompts:  # warm up every model on every prompt's length
        run_once(engine, p.text, ids[p.name], "speculative", 16, ignore_eos=True)
        run_once(engine, p.text, ids[p.name], "target", 16, ignore_eos=True)

    speculative: dict[str, list[float]] = {p.name: [] for p in prompts}
    """Per prompt, each repeat's speedup: the speculative run over the target-only runs around it."""
    target: dict[str, list[float]] = {p.name: [] for p in prompts}
    control: dict[str, list[float]] = {p.name: [] for p in prompts}
    for _ in range(args.repeats):
        for p in prompts:
            # A run's speed depends on what ran before it (buffers, caches, the machine's phase):
            # the speculative run sits between two target-only runs, and is set against both.
            before, speculative_tokens_per_s, after = (
                run_once(engine, p.text, ids[p.name], mode, args.max_tokens, args.ignore_eos)
                for mode in ("target", "speculative", "target")
            )
            speculative[p.name].append(speculative_tokens_per_s / ((before + after) / 2))
            target[p.name].append((before + after) / 2)
            control[p.name].append(after / before)

    print(f"# The first run against target-only ({platform.machine()}, {config.target.location})\n")
    end = f"{args.max_tokens} tokens" if args.ignore_eos else f"to EOS or {args.max_tokens} tokens"
    print(f"no flags: route auto, k 4 fixed, greedy; {end}, {args.repeats} repeats; medians\n")
    print("| prompt | class → route (why) | target-only tokens/s | speedup (median) | speedup range | A/A range |")
    print("|---|---|---|---|---|---|")
    for p in prompts:
        choice = engine.route_choice(p.text)
        ratios = speculative[p.name]
        cells = [
            p.name,
            f"{choice.prompt_class} → {choice.drafter} ({choice.why})",
            f"{statistics.median(target[p.name]):.1f}",
            f"{statistics.median(ratios):.2f}×",
            f"{min(ratios):.2f}–{max(ratios):.2f}",
            f"{min(control[p.name]):.2f}–{max(control[p.name]):.2f}",
        ]
        print("| " + " | ".join(cells) + " |")
    every_control = [c for values in control.values() for c in values]
    print(
        f"\nA/A control (target-only / target-only): median {statistics.median(every_control):.3f}, "
        f"range {min(every_control):.3f}–{max(every_control):.3f}"
    )


if __name__ == "__main__":
    main()
