"""The playground's speculative tokens/s against `specplay run --replay` of the session it saved.

For each drafter (a row per kind: another model, prompt lookup, an early exit), pairs of runs,
the side that goes first alternating:

- TUI: the real playground app driven headless (`app.run_test()`), the drafter pinned, its
  speculative lane beside the target-only lane and redrawing as on screen. The number read is the
  one the lane shows (`LaneTally.tokens_per_s`, the engine's definition: tokens after the first
  over the time since the first, on the lane's own clock). Each pair's app loads its own models
  and runs a short warm-up first, as the headless side is warm.
- headless: the session that run saved, replayed as `specplay run --replay SESSION` configures
  it (`replay_base`), its speculative lane run where the engine runs, on a model thread holding
  models loaded once per row.

The ratio TUI / headless is the number to read (absolute speeds depend on the machine). Beside it:
the share of a core the UI thread took while the lane ran, and the share of the run's wall time
the models waited for frames (drawn between events, runner/gate.py: time, not speed), and the
speedup the stats show (the speculative lane over the target-only lane beside it). With
--control both sides run headless: how far two equal sides read apart here.

    python benchmarks/bench_tui.py                                    # the models `specplay` opens
    python benchmarks/bench_tui.py --target smollm2 --draft lookup=prompt-lookup \\
        --draft exit=early-exit:layers=26 --draft self=smollm2 --max-tokens 64
    python benchmarks/bench_tui.py --target demo --control            # headless against headless

Model flags are those of `specplay` (a fetched name, a GGUF file, a folder, `demo`; with none,
the default models); the prompt is the playground's first unless --prompt gives one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from specplay.backends import open_stream, thread_cleanup
from specplay.bench.stats import quartiles
from specplay.cli.configure import replay_base, run_config
from specplay.config.run_config import RunConfig
from specplay.data.library import library_prompts
from specplay.drafters import kind_of
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.stream import EventStream
from specplay.runner.thread import ModelThread
from specplay.store import load_session
from specplay.ui.app import create_app
from specplay.ui.protocols import RunState
from specplay.ui.stats import compare

POLL_S = 0.05
"""How often the benchmark looks for the speculative lane's end: the UI's share is read then."""
WARMUP_TOKENS = 16


@dataclass(frozen=True)
class TuiRun:
    tokens_per_s: float
    """The speculative lane's, as the lane shows it."""
    session: Path
    ui_share: float
    """The share of a core the UI thread (this one: the app runs here) used from the run's start
    until the app took the speculative lane's last event."""
    held_share: float
    """The share of the run's wall time (both lanes, start to saved session) the models waited
    for frames (runner/gate.py): what drawing cost in time rather than in speed."""
    speedup: float | None
    """The measured speedup the stats show: the speculative lane's tokens/s over the target-only
    lane's, both as shown."""


def headless(thread: ModelThread, stream: EventStream, config: RunConfig) -> float:
    """The speculative lane of `config`'s request, its events consumed where the engine runs."""
    request_config = config.request

    def run() -> float:
        assert request_config.prompt is not None
        ids = tuple(stream.encode(request_config.prompt, raw=request_config.raw))
        request = Request(
            request_config.prompt,
            ids,
            "speculative",
            request_config.seed,
            request_config.max_tokens,
            request_config.ignore_eos,
        )
        done = list(stream.generate(request, LiveControls(config.settings, stream.drafters)))[-1]
        assert isinstance(done, DoneEvent)
        return float(done.metrics["tokens_per_s"])

    return thread.call(run)


async def under_tui(config: RunConfig) -> TuiRun:
    """A fresh app: a warm-up run of a few tokens, then the run measured."""
    app = create_app(config)
    playground = app.playground
    measured = playground.config
    async with app.run_test(size=(160, 50)) as pilot:
        while playground.state != RunState.READY:
            assert playground.state != RunState.FAILED, playground.status
            await pilot.pause(0.1)
        # As a user would: the run starts once the screen has settled, not while Textual still
        # lays out its first frames (--autorun's case, a one-off cost at start).
        await pilot.pause(1.0)
        playground.config = replace(measured, request=replace(measured.request, max_tokens=WARMUP_TOKENS))
        app.action_run()
        while playground.last_session is None:
            assert playground.state != RunState.FAILED, playground.status
            await asyncio.sleep(POLL_S)
        playground.config, playground.last_session = measured, None
        await pilot.pause(0.5)
        wall, cpu, held_s = time.perf_counter(), time.thread_time(), playground.host.gate.held_s
        app.action_run()
        ui_share = None
        while playground.last_session is None:
            assert playground.state != RunState.FAILED, playground.status
            lane = playground.events["speculative"]
            if ui_share is None and lane and isinstance(lane[-1], DoneEvent):
                ui_share = (time.thread_time() - cpu) / (time.perf_counter() - wall)
            # Sleeping hands the loop to the app; the real app has no poll, and a pilot.pause
            # (which waits for the screen to settle) would add work to the thread measured.
            await asyncio.sleep(POLL_S)
        run_s = time.perf_counter() - wall
        if ui_share is None:  # the lane and the session ended within one poll
            ui_share = (time.thread_time() - cpu) / run_s
        held_share = (playground.host.gate.held_s - held_s) / run_s
        tallies = playground.tallies
        shown = tallies["speculative"].tokens_per_s
        assert shown is not None
        speedup = compare(tallies["speculative"], tallies["target"]).speedup
        return TuiRun(shown, playground.last_session, ui_share, held_share, speedup)


def drafter_kind(config: RunConfig, drafter: str) -> str:
    """model, prompt-lookup or early-exit: the kind a session records (a model's file format aside)."""
    return kind_of(config.drafter(drafter)).name


def measure_drafter(config: RunConfig, drafter: str, args: argparse.Namespace) -> list[float]:
    """Pairs of runs with `drafter` pinned; prints each pair and the row, returns the ratios."""
    config = replace(config, settings=replace(config.settings, route=drafter))
    kind = drafter_kind(config, drafter)
    thread = ModelThread(on_exit=thread_cleanup(config))
    ratios, shares, helds, speedups = [], [], [], []
    try:
        stream = thread.call(lambda: open_stream(config))
        warm = replace(config, request=replace(config.request, max_tokens=WARMUP_TOKENS))
        headless(thread, stream, warm)  # untimed
        name = "headless again" if args.control else "TUI"
        last_session: Path | None = None

        def replayed() -> RunConfig:
            """`specplay run --replay SESSION`'s configuration of the last session the app saved."""
            if last_session is None:
                return config
            replay = run_config({}, replay_base(load_session(last_session), {}))
            assert replay.request == config.request and replay.settings == config.settings
            return replay

        for i in range(args.repeats):
            ui = None
            # Alternate which side goes first, so drift (heat, other load) falls on both; a
            # headless side that goes first replays the session of the app's previous run.
            if i % 2 == 1:
                h = headless(thread, stream, replayed())
            if args.control:
                t = headless(thread, stream, config)
            else:
                ui = asyncio.run(under_tui(config))
                gc.collect()  # the closed app's models, before the next side runs
                t, last_session = ui.tokens_per_s, ui.session
            if i % 2 == 0:
                h = headless(thread, stream, replayed())
            ratios.append(t / h)
            extra = ""
            if ui is not None:
                shares.append(ui.ui_share)
                helds.append(ui.held_share)
                extra = f"   UI thread {ui.ui_share:.1%} of a core; frames held the models {ui.held_share:.1%}"
                if ui.speedup is not None:
                    speedups.append(ui.speedup)
                    extra += f"; speedup shown {ui.speedup:.2f}×"
            print(f"  {drafter} pair {i + 1}: headless {h:8.1f}   {name} {t:8.1f} tokens/s   ratio {t / h:.3f}{extra}")
    finally:
        thread.close()
    q1, median, q3 = quartiles(ratios)
    line = f"{drafter} ({kind}): {name}/headless median {median:.3f} (IQR {q1:.3f}-{q3:.3f}, {len(ratios)} pairs)"
    if shares:
        line += f"; UI thread {statistics.median(shares):.1%} of a core, frames held the models"
        line += f" {statistics.median(helds):.1%} of the run"
    if speedups:
        line += f"; speedup shown (over the target-only lane) median {statistics.median(speedups):.2f}×"
    print(line, flush=True)
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="as for specplay: a fetched name, a GGUF file, a folder, demo")
    parser.add_argument("--draft", action="append", metavar="[NAME=]SOURCE", help="as for specplay; repeat")
    parser.add_argument("--drafters", help="comma-separated drafters to measure (default: every one)")
    parser.add_argument("--prompt", help="default: the playground's first library prompt")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--k", type=int)
    parser.add_argument("--repeats", type=int, default=5, help="pairs per drafter (default 5)")
    parser.add_argument("--control", action="store_true", help="run the TUI side headless too (an A/A run)")
    args = parser.parse_args()
    flags = {key: value for key, value in (("target", args.target), ("draft", args.draft), ("k", args.k)) if value}
    prompt = args.prompt or library_prompts()[0].text
    with tempfile.TemporaryDirectory() as sessions:
        flags |= {"prompt": prompt, "max_tokens": args.max_tokens, "ignore_eos": True, "sessions_dir": sessions}
        config = run_config(flags)
        drafters = args.drafters.split(",") if args.drafters else list(config.drafter_names)
        print(f"target {config.target.location}; {args.max_tokens} tokens, k {config.settings.k}, greedy")
        rows = {drafter: measure_drafter(config, drafter, args) for drafter in drafters}
    print()
    for drafter, ratios in rows.items():
        q1, median, q3 = quartiles(ratios)
        print(f"{drafter:<10} {drafter_kind(config, drafter):<14} {median:.3f}  (IQR {q1:.3f}-{q3:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
