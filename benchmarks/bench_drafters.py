"""What each drafter kind costs and earns on a target (the demo target by default, or any other,
e.g. `--target smollm2`): a model drafter, prompt lookup over several n-gram ranges, and early exit
after several layers.

Part 1, per drafter (greedy, k = 4, the shipped prompts plus a rewrite prompt): mean acceptance
length, acceptance rate, the share of rounds that drafted nothing, c (one drafted token's time over
one target-only step, measured beside it), and a round's verify time in target steps. Part 2:
greedy tokens/s of prompt lookup against target-only on the rewrite prompt, the two run
alternately in this one process (the ratio is what to read).

    python benchmarks/bench_drafters.py [--max-tokens N] [--repeats N] [--k K]
    python benchmarks/bench_drafters.py --target smollm2 --exits 8,15,22,26 --draft exit15=HEAD_SPEC

A chat target's prompts go through its chat template (the rewrite prompt as an instruction).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.config.demo import demo_model_paths
from specplay.drafters import parse_model
from specplay.engine.events import DoneEvent, Event, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings

CHAT_REWRITE_PROMPT = (
    "Rewrite this function with pathlib, keeping its name, docstring and behaviour:\n\n"
    'def read_lines(path, encoding="utf-8"):\n'
    '    """Return the lines of a file, without their line endings."""\n'
    "    with open(path, encoding=encoding) as f:\n"
    '        return [line.rstrip("\\n") for line in f]\n'
)
REWRITE_PROMPT = '''def read_lines(path, encoding="utf-8"):
    """Return the lines of a file, without their line endings."""
    with open(path, encoding=encoding) as f:
        return [line.rstrip("\\n") for line in f]


# Rewrite read_lines() above with pathlib, keeping its behaviour:
def read_lines(path, encoding="utf-8"):
'''
LOOKUP_RANGES = ((1, 3), (2, 4), (3, 5), (5, 5))


def events(backend: MlxBackend, prompt: str, mode: str, route: str, k: int, max_tokens: int) -> list[Event]:
    settings = SpecSettings(k=k, route=route, sampling=SamplingParams(0.0))
    ids = tuple(backend.encode(prompt, raw=not backend.tokenizer.has_chat_template))
    request = Request(prompt, ids, mode, 0, max_tokens, ignore_eos=True)  # type: ignore[arg-type]
    return list(SpecEngine(backend).generate(request, LiveControls(settings, backend.drafters)))


def done(run: list[Event]) -> DoneEvent:
    assert isinstance(run[-1], DoneEvent)
    return run[-1]


def costs(backend: MlxBackend, prompts: list[str], args: argparse.Namespace) -> None:
    print(f"\n## Per drafter (greedy, k = {args.k}, {args.max_tokens} tokens, {len(prompts)} prompts)\n")
    print("| drafter | mean acceptance length | acceptance rate | rounds drafting nothing | c | verify (steps) |")
    print("|---|---|---|---|---|---|")
    for route in backend.drafters:
        totals: dict[str, float] = dict.fromkeys(("steps", "drafted", "accepted", "empty", "draft", "verify"), 0)
        for prompt in prompts:
            target = events(backend, prompt, "target", route, args.k, args.max_tokens)
            step_ms = statistics.fmean(e.step_ms for e in target if isinstance(e, StepEvent))
            run = events(backend, prompt, "speculative", route, args.k, args.max_tokens)
            assert done(run).token_ids == done(target).token_ids  # greedy: lossless
            metrics = done(run).metrics
            totals["steps"] += metrics["num_spec_steps"]
            totals["drafted"] += metrics["num_draft_tokens"]
            totals["accepted"] += metrics["num_accepted_draft_tokens"]
            totals["empty"] += metrics["num_spec_steps"] - metrics["num_drafted_per_position"][0]
            # Times in target steps of the same prompt, so prompts of other lengths weigh alike.
            totals["draft"] += metrics["draft_ms"] / step_ms
            totals["verify"] += metrics["verify_ms"] / step_ms
        mal = 1 + totals["accepted"] / totals["steps"]
        rate = totals["accepted"] / totals["drafted"] if totals["drafted"] else 0.0
        c = totals["draft"] / totals["drafted"] if totals["drafted"] else float("nan")
        print(
            f"| {route} | {mal:.2f} | {rate:.2f} | {totals['empty'] / totals['steps']:.0%} | {c:.3f} "
            f"| {totals['verify'] / totals['steps']:.2f} |"
        )


def tokens_per_s(backend: MlxBackend, args: argparse.Namespace, rewrite: str) -> None:
    print(f"\n## Greedy tokens/s on the rewrite prompt ({args.max_tokens} tokens, k = {args.k}, alternating)\n")
    routes = [name for name in backend.drafters if not name.startswith("exit") or name in args.speeds]
    samples: dict[str, list[float]] = {name: [] for name in ["target-only", *routes]}
    ratios: dict[str, list[float]] = {name: [] for name in routes}
    for _ in range(args.repeats):
        target = done(events(backend, rewrite, "target", routes[0], args.k, args.max_tokens))
        samples["target-only"].append(target.metrics["tokens_per_s"])
        for route in routes:
            speculative = done(events(backend, rewrite, "speculative", route, args.k, args.max_tokens))
            samples[route].append(speculative.metrics["tokens_per_s"])
            ratios[route].append(speculative.metrics["tokens_per_s"] / target.metrics["tokens_per_s"])
    print("| lane | tokens/s (median) | over target-only (median, min..max) |")
    print("|---|---|---|")
    print(f"| target-only | {statistics.median(samples['target-only']):.1f} | 1 |")
    for route in routes:
        r = ratios[route]
        print(
            f"| {route} | {statistics.median(samples[route]):.1f} | {statistics.median(r):.2f} "
            f"({min(r):.2f}..{max(r):.2f}) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--target", help="a folder, a GGUF file or a fetched model's name (default: the demo target)")
    parser.add_argument("--exits", default="1,2,3,4,5", help="early-exit layers to try (default 1..5)")
    parser.add_argument("--draft", action="append", default=[], metavar="NAME=SOURCE", help="more drafters")
    parser.add_argument("--speeds", default="", help="early exits whose tokens/s to time too (comma list of names)")
    args = parser.parse_args()
    args.speeds = set(filter(None, args.speeds.split(",")))
    demo_target, demo_drafters = demo_model_paths()
    sources = [] if args.target is not None else [("base", str(demo_drafters["base"]))]
    sources += [(f"lookup{a}-{b}", f"prompt-lookup:n={a}-{b}") for a, b in LOOKUP_RANGES]
    sources += [(f"exit{layers}", f"early-exit:layers={layers}") for layers in args.exits.split(",")]
    sources += [tuple(value.split("=", 1)) for value in args.draft]
    drafters = [(name, parse_model(name, "drafter", source, "draft")) for name, source in sources]
    target = parse_model("target", "target", args.target, "target").location if args.target else str(demo_target)
    backend = load_mlx_backend(target, drafters)
    chat = backend.tokenizer.has_chat_template
    rewrite = CHAT_REWRITE_PROMPT if chat else REWRITE_PROMPT
    print(f"{platform.processor() or platform.machine()}, {platform.python_version()}, target {target}")
    library = Path(__file__).parents[1] / "specplay" / "data" / "prompts.jsonl"
    shipped = [json.loads(line)["text"] for line in library.read_text().splitlines() if line.strip()]
    events(backend, rewrite, "speculative", backend.drafters[0], args.k, 16)  # warm-up
    costs(backend, [rewrite, *shipped[:: max(1, len(shipped) // 6)]], args)
    tokens_per_s(backend, args, rewrite)


if __name__ == "__main__":
    main()
