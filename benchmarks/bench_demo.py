"""The demo models' headline numbers: does the prose drafter close the prose gap, and does
speculation pay on this CPU?

On held-out text (the corpus split the demo models never trained on), for code and prose prompts:
mean acceptance length and draft acceptance rate of `base`, `prose` and the router's choice,
greedy and at temperature 0.7; then greedy tokens/s of speculative decoding against target-only,
the two measured alternately prompt by prompt in this one run (the ratio is what to read).

    python benchmarks/bench_demo.py [--prompts N] [--max-tokens N] [--k K]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.config.demo import DEMO_DRAFTERS, demo_model_paths
from specplay.engine.events import DoneEvent, StartEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import AUTO_ROUTE, SamplingParams, SpecSettings
from specplay.train import corpus

PROMPT_CHARS = 240


def held_out_prompts(kind: str, count: int, seed: int = 0) -> list[str]:
    """Windows of held-out texts, starting at a line start: what a user might paste."""
    texts = corpus.code_texts() if kind == "code" else corpus.prose_texts()
    _, held_out = corpus.split(texts)
    rng = random.Random(seed)
    prompts = []
    for text in rng.sample(held_out, min(count, len(held_out))):
        starts = [0] + [i + 1 for i, c in enumerate(text.body[:-PROMPT_CHARS]) if c == "\n"]
        start = rng.choice(starts)
        prompts.append(text.body[start : start + PROMPT_CHARS])
    return prompts


def generate(
    backend: MlxBackend, prompt: str, mode: str, route: str, temperature: float, k: int, max_tokens: int, seed: int
) -> Iterator[StartEvent | DoneEvent]:
    settings = SpecSettings(k=k, route=route, sampling=SamplingParams(temperature))
    controls = LiveControls(settings, backend.drafters)
    request = Request(prompt, tuple(backend.encode(prompt, raw=True)), mode, seed, max_tokens, ignore_eos=True)
    for event in SpecEngine(backend).generate(request, controls):
        if isinstance(event, StartEvent | DoneEvent):
            yield event


def acceptance(backend: MlxBackend, prompts: dict[str, list[str]], args: argparse.Namespace) -> None:
    print("\n## Acceptance on held-out prompts\n")
    print(f"k = {args.k}, {args.max_tokens} tokens per prompt, {args.prompts} prompts per category.\n")
    print("| category | temperature | drafter | mean acceptance length | draft acceptance rate |")
    print("|---|---|---|---|---|")
    for category, texts in prompts.items():
        for temperature in (0.0, 0.7):
            for route in (*DEMO_DRAFTERS, AUTO_ROUTE):
                accepted = steps = drafted = 0
                chosen: dict[str, int] = defaultdict(int)
                for i, prompt in enumerate(texts):
                    for event in generate(
                        backend, prompt, "speculative", route, temperature, args.k, args.max_tokens, seed=i
                    ):
                        if isinstance(event, StartEvent):
                            chosen[event.drafter or "?"] += 1
                        else:
                            accepted += event.metrics["num_accepted_draft_tokens"]
                            steps += event.metrics["num_spec_steps"]
                            drafted += event.metrics["num_draft_tokens"]
                label = (
                    route if route != AUTO_ROUTE else "auto (" + ", ".join(f"{n} {c}" for n, c in chosen.items()) + ")"
                )
                mal, rate = 1 + accepted / steps, accepted / drafted
                print(f"| {category} | {temperature:g} | {label} | {mal:.2f} | {rate:.3f} |", flush=True)


def speed(backend: MlxBackend, prompts: dict[str, list[str]], args: argparse.Namespace) -> None:
    print("\n## Greedy tokens/s, speculative over target-only (alternating, same run)\n")
    print("| category | drafter | median speedup | range | target-only tokens/s (median) |")
    print("|---|---|---|---|---|")
    for category, texts in prompts.items():
        for route in DEMO_DRAFTERS:
            ratios, baseline = [], []
            for i, prompt in enumerate(texts):
                rates = {}
                for mode in ("target", "speculative"):
                    done = list(generate(backend, prompt, mode, route, 0.0, args.k, args.max_tokens, seed=i))[-1]
                    rates[mode] = done.metrics["tokens_per_s"]
                ratios.append(rates["speculative"] / rates["target"])
                baseline.append(rates["target"])
            print(
                f"| {category} | {route} | {statistics.median(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f} | "
                f"{statistics.median(baseline):.1f} |",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=10, help="held-out prompts per category")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    target, drafters = demo_model_paths()
    backend = load_mlx_backend(str(target), [(name, str(path)) for name, path in drafters.items()])
    prompts = {kind: held_out_prompts(kind, args.prompts) for kind in ("code", "prose")}
    print(f"# specplay demo models on {platform.machine()} {platform.system()}, Python {sys.version.split()[0]}")
    list(generate(backend, prompts["code"][0], "speculative", DEMO_DRAFTERS[0], 0.0, args.k, 16, seed=0))  # warm-up
    acceptance(backend, prompts, args)
    if not args.skip_speed:
        speed(backend, prompts, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
