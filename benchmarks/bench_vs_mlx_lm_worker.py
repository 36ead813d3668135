"""One side of bench_vs_mlx_lm.py --processes, in its own process, generating in turns.

    python benchmarks/bench_vs_mlx_lm_worker.py --side specplay --mode speculative --target DIR --draft DIR

loads the models, warms up and prints `{"ready": ...}`. Then each line it reads on stdin is a
turn: `{"tokens": N}` runs the current generation (a new one when none is open) until at least N
more tokens have arrived, stops, and prints one JSON line (tokens, seconds, whether the
generation ended, and at its end what it made). The parent alternates two such processes turn by
turn, so both sides share every phase of the machine at a grain of a tenth of a second. An empty
line ends the process.

specplay runs as `specplay run` does (the CLI's flags, its model thread, its event stream, tokens
counted on the main thread as they arrive); `--path engine` reads the engine's events where it
runs instead. mlx-lm runs through `stream_generate`, as its own CLI does. Both sides load
OpenBLAS the same way and run the same fp32 weights.

A turn's clock runs from its resumption to its last token's arrival and the drain of work still
in flight (both sides compute one step ahead), so every computation is on some turn's clock and
none runs while the other side has the machine. The first token of a generation starts the
clock and is not counted: (tokens after the first) / (their time), mlx-lm's generation_tps.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core, for both sides alike)

# isort: split
import mlx.core as mx
from bench_vs_mlx_lm import mlx_lm_acceptance

from specplay.backends.mlx import blas

SIDES = ("specplay", "mlx-lm")
MODES = ("speculative", "target")
PATHS = ("cli", "engine")
DRAFTER = "draft"


@dataclass
class Generated:
    """What one generation made, sent with its last turn."""

    ids: list[int]
    acceptance: float | None = None
    tokens_per_round: float | None = None
    per_round_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class TurnReply:
    tokens: int
    seconds: float
    ended: bool
    generated: Generated | None = None


def openblas_threads() -> int | None:
    if blas.OPENBLAS_PATH is None:
        return None
    return int(ctypes.CDLL(blas.OPENBLAS_PATH).openblas_get_num_threads())


class Turns:
    """One generation's tokens as they arrive, cut into the turns the parent asks for.

    `arrive` is called on the reading thread with each event's tokens. When a turn has its
    tokens, `pause` waits until the side computes nothing more (the drain), the clock stops, the
    reply goes out and the next turn's request is read; then the clock restarts and `resume`
    lets the side go on. Created as the generation starts: it reads the first turn's request.
    """

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None] = lambda: None) -> None:
        self.pause, self.resume = pause, resume
        self.quota = read_turn()
        self.counter = TurnCounter()
        self.turn_start: float | None = None  # set by the first token
        self.last_arrival = 0.0

    def arrive(self, token_ids: list[int]) -> None:
        self.last_arrival = time.perf_counter()
        if self.turn_start is None:
            self.turn_start = self.last_arrival
        if not self.counter.add(token_ids, self.quota):
            return
        self.pause()
        tokens, self.counter.count = self.counter.count, 0
        reply(asdict(TurnReply(tokens, time.perf_counter() - self.turn_start, ended=False)))
        self.quota = read_turn()
        self.turn_start = time.perf_counter()
        self.resume()

    def end(self, generated: Generated) -> None:
        """The generation is over: its last turn's reply, timed to its last token (none when the
        turn before took the last), with what it made."""
        assert self.turn_start is not None, "a generation makes at least one token"
        seconds = max(0.0, self.last_arrival - self.turn_start)
        reply(asdict(TurnReply(self.counter.count, seconds, ended=True, generated=generated)))


class TurnCounter:
    """Where a turn ends, counted alike on the reading thread and by the gate on the model
    thread (the same events, in order), so the two agree without talking mid-turn. The
    generation's first token starts the clock and is not counted."""

    def __init__(self) -> None:
        self.first, self.count = True, 0

    def add(self, token_ids: list[int], quota: int) -> bool:
        """Count an event's tokens (it has some); True when the turn is complete."""
        self.count += len(token_ids) - (1 if self.first else 0)
        self.first = False
        return self.count >= quota


def read_turn() -> int:
    """The next turn's token count; an empty line (or the parent gone) ends the process."""
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    return int(json.loads(line)["tokens"])


def reply(value: dict[str, Any]) -> None:
    print(json.dumps(value), flush=True)


Generate = Callable[[int, bool], None]
"""Generate n tokens: in the turns the parent asks for (True), or straight through (the warm-up)."""
Side = tuple[Generate, Callable[[], None]]
"""A side's generate, and what closes it."""


def specplay_side(args: argparse.Namespace) -> Side:
    """A `specplay run` with these flags. `--path cli`: the engine on the model thread, its events
    read on the main thread, and a gate on the model thread that holds the engine between turns;
    `--path engine`: the engine's events consumed on the main thread, where it runs."""
    from specplay.backends import open_source, thread_cleanup
    from specplay.cli import build_parser
    from specplay.cli.run import configure
    from specplay.engine.controls import LiveControls
    from specplay.engine.events import DoneEvent, Event, RoundEvent, StepEvent
    from specplay.engine.request import Request
    from specplay.runner.session_run import run_sample
    from specplay.runner.thread import ModelThread

    flags = ["run", "--target", args.target, "--mode", args.mode, "--k", str(args.k), "--temperature", "0"]
    flags += ["--prompt", args.prompt, "--raw", "--ignore-eos", "--max-tokens", str(args.max_tokens)]
    if args.mode == "speculative":
        flags += ["--draft", f"{DRAFTER}={args.draft}"]
    config = configure(build_parser().parse_args(flags))
    thread = ModelThread(on_exit=thread_cleanup(config))
    source = thread.call(lambda: open_source(config)) if args.path == "cli" else open_source(config)
    ids = tuple(source.encode(args.prompt, raw=True))

    def tokens_of(event: Event) -> list[int]:
        if isinstance(event, RoundEvent):
            return [token.token_id for token in event.tokens]
        return [event.token.token_id] if isinstance(event, StepEvent) else []

    def generated(done: DoneEvent) -> Generated:
        metrics = done.metrics
        result = Generated(list(done.token_ids))
        if args.mode == "speculative":
            result.acceptance = metrics["draft_acceptance_rate"]
            result.tokens_per_round = metrics["mean_acceptance_length"]
            rounds = metrics["num_spec_steps"]
            result.per_round_ms = {key: metrics[f"{key}_ms"] / rounds for key in ("draft", "verify", "overhead")}
        return result

    def read(turns: Turns | None, event: Event) -> None:
        if turns is None:
            return
        if isinstance(event, DoneEvent):
            turns.end(generated(event))
        elif token_ids := tokens_of(event):
            turns.arrive(token_ids)

    def generate(n: int, in_turns: bool) -> None:
        request = Request(args.prompt, ids, args.mode, 0, n, ignore_eos=True)
        if args.path == "engine":
            turns = Turns(pause=mx.synchronize) if in_turns else None
            for event in source.generate(request, LiveControls(config.settings, source.drafters)):
                read(turns, event)
            return
        if not in_turns:
            run_sample(thread, source, config, request, lambda *_: None, save=False, baseline=False)
            return
        gate = Gate(tokens_of, quota=lambda: turns.quota)
        turns = Turns(pause=gate.wait_drained, resume=gate.open)
        gated: Any = GatedSource(source, gate)
        run_sample(thread, gated, config, request, lambda _, event: read(turns, event), save=False, baseline=False)

    def close() -> None:
        thread.call(source.close)
        thread.close()

    return generate, close


class Gate:
    """On the model thread: after the event that completes a turn, drain MLX and wait to be let go."""

    def __init__(self, tokens_of: Callable[[Any], list[int]], quota: Callable[[], int]) -> None:
        self.tokens_of, self.quota = tokens_of, quota
        self._drained = threading.Event()
        self._go = threading.Event()

    def hold(self, events: Iterator[Any]) -> Iterator[Any]:
        counter = TurnCounter()
        for event in events:
            yield event
            if (token_ids := self.tokens_of(event)) and counter.add(token_ids, self.quota()):
                counter.count = 0
                mx.synchronize()
                self._drained.set()
                self._go.wait()
                self._go.clear()

    def wait_drained(self) -> None:
        self._drained.wait()
        self._drained.clear()

    def open(self) -> None:
        self._go.set()


class GatedSource:
    """The event source as run_sample sees it, its events passing the gate on the model thread."""

    def __init__(self, source: Any, gate: Gate) -> None:
        self.source, self.gate = source, gate
        self.drafters, self.capabilities, self.route_map = source.drafters, source.capabilities, source.route_map

    def generate(self, *args: Any) -> Iterator[Any]:
        return self.gate.hold(self.source.generate(*args))


def mlx_lm_side(args: argparse.Namespace) -> Side:
    """mlx-lm's stream_generate on the same weights specplay runs (fp32 on CPUs)."""
    import mlx_lm
    from mlx_lm.generate import generation_stream
    from mlx_lm.sample_utils import make_sampler

    from specplay.backends.mlx.loading import encode_prompt, resolve_model_path, upcast_for_cpu

    def load(source: str) -> tuple[Any, Any]:
        model, tokenizer = mlx_lm.load(str(resolve_model_path(source)))
        return (upcast_for_cpu(model) if mx.default_device() == mx.cpu else model), tokenizer

    model, tokenizer = load(args.target)
    draft = load(args.draft)[0] if args.mode == "speculative" else None
    ids = encode_prompt(tokenizer, args.prompt, raw=True)
    tokenizer = copy.copy(tokenizer)
    tokenizer.eos_token_ids = ()  # mlx-lm has no ignore_eos: a tokenizer without EOS ids stands in for it
    extra: dict[str, Any] = {"sampler": make_sampler(temp=0.0)}
    if draft is not None:
        extra.update(draft_model=draft, num_draft_tokens=args.k)

    def generate(n: int, in_turns: bool) -> None:
        turns = Turns(pause=lambda: mx.synchronize(generation_stream)) if in_turns else None
        made, from_draft = [], []
        for response in mlx_lm.stream_generate(model, tokenizer, ids, max_tokens=n, **extra):
            made.append(response.token)
            from_draft.append(response.from_draft)
            if turns is not None:
                turns.arrive([response.token])
        if turns is not None:
            result = Generated(made)
            if draft is not None:
                result.acceptance, result.tokens_per_round = mlx_lm_acceptance(from_draft, args.k)
            turns.end(result)

    return generate, lambda: None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--side", choices=SIDES, required=True)
    add("--mode", choices=MODES, required=True)
    add("--target", required=True, help="an mlx-lm folder or a GGUF file")
    add("--draft", help="the drafter's folder (speculative mode)")
    add("--k", type=int, default=3)
    add("--max-tokens", type=int, default=200, help="tokens per generation")
    add("--warmup-tokens", type=int, default=32, help="tokens generated before the first turn")
    add("--prompt", required=True)
    add("--path", choices=PATHS, default="cli", help="specplay: through `specplay run`'s threads, or in place")
    args = parser.parse_args()
    if args.mode == "speculative" and not args.draft:
        parser.error("--mode speculative needs --draft")
    return args


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    generate, close = (specplay_side if args.side == "specplay" else mlx_lm_side)(args)

    start = time.perf_counter()
    generate(args.warmup_tokens, False)
    reply({"ready": True, "warmup_s": time.perf_counter() - start, "blas_threads": openblas_threads()})
    try:
        while True:
            generate(args.max_tokens, True)
    finally:
        close()


if __name__ == "__main__":
    main()
