"""One side of `python -m benchmarks.vs_mlx_lm --processes`, in its own process, generating in turns.

    python -m benchmarks.vs_mlx_lm.worker --side specplay --mode speculative --target DIR --draft DIR

loads the models, warms up and prints `{"ready": ...}`. Then each line it reads on stdin is a
turn: `{"seconds": S}` runs the current generation (a new one when none is open) until a token
arrives S seconds or more into the turn, stops, and prints one JSON line (tokens, seconds,
whether the generation ended, and at its end what it made). The parent alternates two such
processes turn by turn, so both sides share every phase of the machine at a grain of a few tenths
of a second. An empty line ends the process.

specplay runs as `specplay run` does (the CLI's flags, its runner recording each lane, events
read on the main thread where the engine runs); `--path engine` consumes the engine's events
bare; `--path backend` runs the MLX backend's draft, verify and commit with no engine at all
(accepted greedily in a loop of its own here), so the three paths split what each layer adds.
mlx-lm runs through `stream_generate`, as its own CLI does. Both sides load OpenBLAS the same way
and run the same fp32 weights.

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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core, for both sides alike)

# isort: split
import mlx.core as mx

from benchmarks.vs_mlx_lm.one_process import mlx_lm_acceptance
from benchmarks.vs_mlx_lm.processes import SPECPLAY_PATHS
from specplay.backends.mlx import blas
from specplay.engine.accept import greedy_accept
from specplay.engine.draws import RoundDraws
from specplay.engine.speedup import draft_acceptance_rate, mean_acceptance_length
from specplay.engine.tree import tree_shape

if TYPE_CHECKING:
    from specplay.engine.loop import SpecEngine
    from specplay.engine.settings import SpecSettings

SIDES = ("specplay", "mlx-lm")
MODES = ("speculative", "target")
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

    When a turn has lasted its seconds, MLX is drained (`drain`: the side's work in flight), the
    clock stops, the reply goes out and the next turn's request is read; then the clock restarts.
    Created as the generation starts: it reads the first turn's request. The generation's first
    token starts the clock and is not counted.
    """

    def __init__(self, drain: Callable[[], None]) -> None:
        self.drain = drain
        self.quota_s = read_turn()
        self.count = 0
        self.turn_start: float | None = None
        self.last_arrival = 0.0
        self.paused_s = 0.0
        """Time spent between turns (the other side's): the engine's clock runs on through it."""

    def arrive(self, token_ids: list[int]) -> None:
        self.last_arrival = time.perf_counter()
        if self.turn_start is None:
            self.turn_start, token_ids = self.last_arrival, token_ids[1:]
        self.count += len(token_ids)
        if self.last_arrival - self.turn_start < self.quota_s or not self.count:
            return
        self.drain()
        paused = time.perf_counter()
        reply(asdict(TurnReply(self.count, paused - self.turn_start, ended=False)))
        self.quota_s, self.count = read_turn(), 0
        self.turn_start = time.perf_counter()
        self.paused_s += self.turn_start - paused

    def end(self, generated: Generated) -> None:
        """The generation is over: its last turn's reply, timed to its last token (none when the
        turn before took the last), with what it made."""
        assert self.turn_start is not None, "a generation makes at least one token"
        seconds = max(0.0, self.last_arrival - self.turn_start)
        reply(asdict(TurnReply(self.count, seconds, ended=True, generated=generated)))


def read_turn() -> float:
    """The next turn's length in seconds; an empty line (or the parent gone) ends the process."""
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    return float(json.loads(line)["seconds"])


def reply(value: dict[str, Any]) -> None:
    print(json.dumps(value), flush=True)


Generate = Callable[[int, bool], None]
"""Generate n tokens: in the turns the parent asks for (True), or straight through (the warm-up)."""
Side = tuple[Generate, Callable[[], None]]
"""A side's generate, and what closes it."""


def specplay_side(args: argparse.Namespace) -> Side:
    """A `specplay run` with these flags, its engine's events consumed bare (`--path engine`), or
    its MLX backend alone (`--path backend`)."""
    from specplay.backends import open_stream
    from specplay.cli import build_parser
    from specplay.cli.run import configure
    from specplay.engine.events import DoneEvent, Event, RoundEvent, StepEvent
    from specplay.engine.live_controls import LiveControls
    from specplay.engine.loop import SpecEngine
    from specplay.engine.request import Request
    from specplay.runner.session_run import run_sample

    flags = ["run", "--target", args.target, "--mode", args.mode, "--k", str(args.k), "--temperature", "0"]
    flags += ["--prompt", args.prompt, "--raw", "--ignore-eos", "--max-tokens", str(args.max_tokens)]
    if args.mode == "speculative":
        flags += ["--draft", f"{DRAFTER}={args.draft}"]
    config = configure(build_parser().parse_args(flags))
    source = open_stream(config)
    ids = tuple(source.encode(args.prompt, raw=True))

    def generated(done: DoneEvent, paused_s: float) -> Generated:
        metrics = done.metrics
        result = Generated(list(done.token_ids))
        if args.mode == "speculative":
            result.acceptance = metrics["draft_acceptance_rate"]
            result.tokens_per_round = metrics["mean_acceptance_length"]
            rounds = metrics["num_spec_steps"]
            result.per_round_ms = {key: metrics[f"{key}_ms"] / rounds for key in ("draft", "verify", "overhead")}
            # The engine's host time runs from one round's end to the next's start: out of it, the
            # other side's turns, which fell there.
            result.per_round_ms["overhead"] -= paused_s * 1000 / rounds
        return result

    def read(turns: Turns | None, event: Event) -> None:
        if turns is None:
            return
        if isinstance(event, DoneEvent):
            turns.end(generated(event, turns.paused_s))
        elif isinstance(event, RoundEvent):
            turns.arrive([token.token_id for token in event.tokens])
        elif isinstance(event, StepEvent):
            turns.arrive([event.token.token_id])

    def generate(n: int, in_turns: bool) -> None:
        request = Request(args.prompt, ids, args.mode, 0, n, ignore_eos=True)
        turns = Turns(drain=mx.synchronize) if in_turns else None
        if args.path == "cli":
            run_sample(source, config, request, lambda _, event: read(turns, event), save=False, baseline=False)
            return
        if args.path == "backend":
            assert isinstance(source, SpecEngine)
            bare_backend(source, config.settings, args, ids, n, turns)
            return
        for event in source.generate(request, LiveControls(config.settings, source.drafters)):
            read(turns, event)

    return generate, source.close


def bare_backend(
    engine: SpecEngine,
    settings: SpecSettings,
    args: argparse.Namespace,
    ids: tuple[int, ...],
    n: int,
    turns: Turns | None,
) -> None:
    """n greedy tokens from the backend alone: target steps, or rounds of draft, verify, accept
    the drafted tokens that match the target's argmax, commit them with the correction or bonus."""
    generation = engine.backend.open_generation(ids, prefill=(None, DRAFTER) if args.mode == "speculative" else (None,))
    sampling, rule = settings.sampling, settings.acceptance_rule
    no_draws = RoundDraws(draft=[], accept=[], residual=[], bonus=0.0)  # greedy: no draw is read
    made: list[int] = []
    drafted = accepted = rounds = 0
    if args.mode == "target":
        stream = generation.generate(None, sampling, lambda: 0.0)
        while len(made) < n:
            made.append(next(stream))
            if turns is not None:
                turns.arrive(made[-1:])
        stream.close()
    else:
        while len(made) < n:
            draft = generation.draft(DRAFTER, tree_shape(1, 0, min(args.k, n - len(made))), sampling, [], None)
            verified = generation.verify(draft, sampling, rule, no_draws)
            kept = 0
            while kept < len(verified.drafted) and greedy_accept(verified.drafted[kept], verified.target_argmax[kept]):
                kept += 1
            last = verified.row_tokens[kept]  # the correction, or after every drafted token the bonus
            committed = [*verified.drafted[:kept], last][: n - len(made)]
            generation.commit(committed)
            made += committed
            drafted, accepted, rounds = drafted + len(verified.drafted), accepted + kept, rounds + 1
            if turns is not None:
                turns.arrive(committed)
    if turns is not None:
        result = Generated(made)
        if rounds:
            result.acceptance = draft_acceptance_rate(accepted, drafted)
            result.tokens_per_round = mean_acceptance_length(accepted, rounds)
        turns.end(result)


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
        turns = Turns(drain=lambda: mx.synchronize(generation_stream)) if in_turns else None
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
    add(
        "--path",
        choices=tuple(SPECPLAY_PATHS),
        default="cli",
        help="specplay: as `specplay run`, its engine bare, or its MLX backend alone",
    )
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
