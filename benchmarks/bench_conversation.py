"""A conversation's second turn, after a long first one: what keeping the lane's caches saves.

Turn 1 is a long prompt (the prompt library's texts, joined until it holds `--first-tokens`
tokens, then a question) and its answer; turn 2 a short follow-up, encoded after turn 1's exchange
as `specplay run` and the playground encode it. Turn 2's time to first token (the engine's
`time_to_first_token_ms`: the prefill and the first round or step) is measured two ways, on one
engine in this one process:

- `kept`: turn 2 continues turn 1 (`Request(continues=True)`): the caches keep what the longer
  prompt shares with turn 1's, and only the new tokens are prefilled;
- `re-prefill`: turn 2 from empty caches (`continues=False`): the whole conversation prefilled.

Each side runs turn 1 first, so both start from the same state. Each repeat runs `kept`,
`re-prefill` and `kept` again (the A/A control: the same side twice), the order rotating from
repeat to repeat so drift falls on all alike; the ratios are taken within a repeat, their median
and range over repeats printed. Greedy, so every turn 2 answers the same text.

    python -m benchmarks.bench_conversation                            # the demo models
    python -m benchmarks.bench_conversation --target smollm2 --route exit --repeats 5
    python -m benchmarks.bench_conversation --modes target --first-tokens 2048

`--target smollm2` needs SmolLM2 fetched (`specplay fetch smollm2`; the tests' copy is found with
SPECPLAY_CACHE_DIR=~/.cache/specplay-tests).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends import open_stream
from specplay.backends.mlx import blas
from specplay.bench.stats import quartiles
from specplay.cli import build_parser
from specplay.cli.configure import given, run_config
from specplay.data.library import library_prompts
from specplay.engine.conversation import Exchange, shared_prefix
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings

QUESTION = "\n\nWhich of the passages above is about code, and what does it do?"
FOLLOW_UP = "Now say that again in one sentence."
SIDES = ("kept", "re-prefill", "kept again")


@dataclass(frozen=True)
class Turn:
    prompt: str
    ids: tuple[int, ...]


def long_prompt(engine: SpecEngine, tokens: int) -> str:
    """The library's texts joined until the chat-templated prompt holds `tokens` tokens."""
    texts = [p.text for p in library_prompts()]
    passages: list[str] = []
    while len(engine.encode("\n\n".join(passages) + QUESTION, False)) < tokens:
        passages.append(texts[len(passages) % len(texts)])
    return "\n\n".join(passages) + QUESTION


def generate(engine: SpecEngine, request: Request, settings: SpecSettings) -> DoneEvent:
    *_, done = engine.generate(request, LiveControls(settings, engine.drafters))
    assert isinstance(done, DoneEvent)
    return done


@dataclass(frozen=True)
class TurnTwo:
    ttft_ms: float
    prompt_tokens: int
    new_tokens: int
    """Those not shared with turn 1's prompt and answer: what a kept cache still prefills."""
    text: str


def turn_two(
    engine: SpecEngine, mode: str, first: Turn, settings: SpecSettings, answer_tokens: int, keep: bool
) -> TurnTwo:
    """Turn 1, then turn 2 kept or from empty caches."""
    one = generate(engine, Request(first.prompt, first.ids, mode, max_tokens=answer_tokens), settings)  # type: ignore[arg-type]
    ids = tuple(engine.encode(FOLLOW_UP, False, [Exchange(first.prompt, one.text)]))
    two = generate(engine, Request(FOLLOW_UP, ids, mode, max_tokens=8, continues=keep), settings)  # type: ignore[arg-type]
    shared = shared_prefix([*first.ids, *one.token_ids], ids)
    return TurnTwo(float(two.metrics["time_to_first_token_ms"]), len(ids), len(ids) - shared, two.text)


def ratio_line(label: str, values: Sequence[float]) -> str:
    q1, median, q3 = quartiles(values)
    return f"{label} {median:.3f} (IQR {q1:.3f}–{q3:.3f}, range {min(values):.3f}–{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo", help="as `specplay --target` (default: the demo models)")
    parser.add_argument("--draft", action="append", default=[], help="as `specplay --draft` (default: the set's)")
    parser.add_argument("--route", help="the speculative lane's drafter (default: the first)")
    parser.add_argument("--modes", default="target,speculative", help="comma-separated: target, speculative")
    parser.add_argument("--first-tokens", type=int, default=1024, help="turn 1's prompt length in tokens")
    parser.add_argument("--answer-tokens", type=int, default=32, help="turn 1's answer length in tokens")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    flags = ["run", "--target", args.target, *(f for d in args.draft for f in ("--draft", d))]
    config = run_config(given(build_parser().parse_args(flags)))
    engine = open_stream(config)
    assert isinstance(engine, SpecEngine)
    route = args.route or engine.drafters[0]
    settings = SpecSettings(k=4, route=route, policy="fixed")
    text = long_prompt(engine, args.first_tokens)
    first = Turn(text, tuple(engine.encode(text, False)))
    modes = args.modes.split(",")
    started = time.perf_counter()
    for mode in modes:  # warm up every model on both prompt lengths
        turn_two(engine, mode, first, settings, args.answer_tokens, keep=True)

    print(f"# Turn 2's time to first token, caches kept against re-prefilled ({platform.machine()}, {args.target})\n")
    print(
        f"turn 1: {len(first.ids)} prompt tokens (as `run` encodes them), a {args.answer_tokens}-token answer; "
        f"turn 2: {FOLLOW_UP!r}; greedy, k 4 fixed, route {route}; {args.repeats} repeats; "
        f"OpenBLAS threads {blas.THREADS_CHOSEN}\n"
    )
    print("| mode | turn 2 prompt (new) | kept, ms | re-prefill, ms | re-prefill / kept | kept again / kept (A/A) |")
    print("|---|---|---|---|---|---|")
    details = []
    for mode in modes:
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        seen: list[TurnTwo] = []
        for repeat in range(args.repeats):
            for side in SIDES[repeat % 3 :] + SIDES[: repeat % 3]:
                two = turn_two(engine, mode, first, settings, args.answer_tokens, keep=side != "re-prefill")
                times[side].append(two.ttft_ms)
                seen.append(two)
        texts = {two.text for two in seen}
        assert len(texts) == 1, f"{mode}: turn 2 answered differently kept and re-prefilled: {texts}"
        saving = [r / k for r, k in zip(times["re-prefill"], times["kept"], strict=True)]
        control = [a / k for a, k in zip(times["kept again"], times["kept"], strict=True)]
        cells = [
            mode,
            f"{seen[0].prompt_tokens} ({seen[0].new_tokens})",
            f"{statistics.median(times['kept']):.1f}",
            f"{statistics.median(times['re-prefill']):.1f}",
            f"{statistics.median(saving):.2f}× ({min(saving):.2f}–{max(saving):.2f})",
            f"{statistics.median(control):.3f} ({min(control):.3f}–{max(control):.3f})",
        ]
        print("| " + " | ".join(cells) + " |")
        details.append(f"{mode}: {ratio_line('re-prefill / kept', saving)}; {ratio_line('A/A', control)}")
    print("\n" + "\n".join(details))
    print(f"({time.perf_counter() - started:.0f} s; ms: medians over repeats; ratios within a repeat: median (range))")


if __name__ == "__main__":
    main()
