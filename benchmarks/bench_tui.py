"""Tokens/s of the speculative lane under the playground against headless generation.

The same models, prompt, seed and settings run two ways, alternately, several times:

- headless: the engine's events consumed where it runs, as `specplay run` does (here on the
  ModelThread that loaded the models);
- TUI: the real playground app driven headless (`app.run_test()`), its speculative lane beside
  the target-only lane, redrawing as it would on screen. Each pair's app loads its own models
  and runs once, untimed, before the run measured, as the headless side was warmed.

Both sides report the speculative lane's tokens/s the engine measures (DoneEvent.metrics: tokens
after the first over the time since the first). Under the TUI the lane's clock runs only during
its own turns, so the target-only lane's turns are not counted against it; what is counted is
everything the UI costs the model thread while it computes (the GIL, the UI's CPU, the
drill-down's top-5 per round). Frames are drawn while the models wait between events
(runner/gate.py), outside every lane's clock: what they cost in wall time is printed beside, as
the share of the run the models were held. The ratio is the number to read; absolute speeds
depend on the machine. With --control both sides run headless, one after the other as the pairs
do: how far two equal sides read apart on this machine, the spread a TUI reading must clear.

    python benchmarks/bench_tui.py                       # the shipped demo models
    python benchmarks/bench_tui.py --target T --draft near=D --max-tokens 300 --repeats 5
    python benchmarks/bench_tui.py --control             # headless against headless
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from bench_vs_mlx_lm_processes import quartiles

from specplay.backends.mlx import load_mlx_backend, release_thread
from specplay.config.demo import demo_model_paths
from specplay.config.run import ModelSpec, RequestSpec, RunConfig
from specplay.engine.controls import LiveControls
from specplay.engine.events import DoneEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.runner.thread import ModelThread
from specplay.ui.app import create_app

POLL_S = 0.05
"""How often the benchmark looks for the speculative lane's end: the UI's share is read then."""
PROMPT = "def parse(path):\n    with open(path) as f:\n        return"


def default_models() -> tuple[str, list[tuple[str, str]]]:
    """The demo models that ship inside specplay."""
    target, drafters = demo_model_paths()
    return str(target), [(name, str(path)) for name, path in drafters.items()]


def headless(thread: ModelThread, backend: object, args: argparse.Namespace, settings: SpecSettings) -> float:
    def run() -> float:
        engine = SpecEngine(backend)  # type: ignore[arg-type]
        ids = tuple(engine.encode(args.prompt, raw=True))
        request = Request(args.prompt, ids, "speculative", args.seed, args.max_tokens, ignore_eos=True)
        done = [e for e in engine.generate(request, LiveControls(settings, engine.drafters))][-1]
        assert isinstance(done, DoneEvent)
        return float(done.metrics["tokens_per_s"])

    return thread.call(run)


@dataclass(frozen=True)
class TuiRun:
    tokens_per_s: float
    """The speculative lane's, as the engine measured it on the lane's clock."""
    ui_share: float
    """The share of a core the UI thread (this one: the app runs here) used from the run's start
    until the app took the speculative lane's last event."""
    held_share: float
    """The share of the run's wall time (both lanes, start to saved session) the models waited
    for frames (runner/gate.py): what drawing cost in time rather than in speed."""


async def under_tui(args: argparse.Namespace, drafters: list[tuple[str, str]], settings: SpecSettings) -> TuiRun:
    """The second of two runs in a fresh app: the first warms its models, as the headless side's
    models were warmed."""
    with tempfile.TemporaryDirectory() as sessions:
        config = RunConfig(
            ModelSpec("target", "target", "mlx", args.target),
            tuple(ModelSpec(name, "drafter", "mlx", path) for name, path in drafters),
            request=RequestSpec(args.prompt, raw=True, seed=args.seed, max_tokens=args.max_tokens, ignore_eos=True),
            settings=settings,
            sessions_dir=Path(sessions),
        )
        app = create_app(config)
        playground = app.playground
        async with app.run_test(size=(160, 50)) as pilot:
            while playground.state != "ready":
                assert playground.state != "failed", playground.status
                await pilot.pause(0.1)
            # As a user would: the run starts once the screen has settled, not while Textual still
            # lays out its first frames (--autorun's case, a one-off cost at start).
            await pilot.pause(1.0)
            app.action_run()  # the warm-up run, untimed
            while playground.last_session is None:
                assert playground.state != "failed", playground.status
                await asyncio.sleep(POLL_S)
            playground.last_session = None
            await pilot.pause(0.5)
            wall, cpu, held_s = time.perf_counter(), time.thread_time(), playground.host.gate.held_s
            app.action_run()
            ui_share = None
            while playground.last_session is None:
                assert playground.state != "failed", playground.status
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
            done = playground.events["speculative"][-1]
        assert isinstance(done, DoneEvent)
        return TuiRun(float(done.metrics["tokens_per_s"]), ui_share, held_share)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="target model folder (default: the shipped demo models)")
    parser.add_argument("--draft", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=9, help="pairs of runs, each side in turn (default 9)")
    parser.add_argument("--control", action="store_true", help="run the TUI side headless too (an A/A run)")
    args = parser.parse_args()
    if args.target:
        drafters = [tuple(d.split("=", 1)) if "=" in d else (Path(d).name, d) for d in args.draft]
    else:
        args.target, drafters = default_models()
    if not drafters:
        parser.error("--draft is needed with --target")
    settings = SpecSettings(k=args.k, route=drafters[0][0], sampling=SamplingParams(temperature=args.temperature))
    print(f"target {args.target}, drafter {drafters[0][0]}, k={args.k}, T={args.temperature}, {args.max_tokens} tokens")

    thread = ModelThread(on_exit=release_thread)
    try:
        backend = thread.call(lambda: load_mlx_backend(args.target, drafters))
        headless(thread, backend, args, settings)  # warm-up, untimed
        ratios, shares, helds = [], [], []
        name = "headless again" if args.control else "TUI"

        def other() -> tuple[float, TuiRun | None]:
            if args.control:
                return headless(thread, backend, args, settings), None
            run = asyncio.run(under_tui(args, drafters, settings))
            return run.tokens_per_s, run

        for i in range(args.repeats):
            # Alternate which side goes first, so drift (heat, other load) falls on both.
            if i % 2 == 0:
                h = headless(thread, backend, args, settings)
                t, ui = other()
            else:
                t, ui = other()
                h = headless(thread, backend, args, settings)
            ratios.append(t / h)
            share = ""
            if ui is not None:
                shares.append(ui.ui_share)
                helds.append(ui.held_share)
                share = f"   UI thread {ui.ui_share:.1%} of a core; frames held the models {ui.held_share:.1%}"
            print(f"pair {i + 1}: headless {h:8.1f} tok/s   {name} {t:8.1f} tok/s   {name}/headless {t / h:.3f}{share}")
    finally:
        thread.close()
    q1, median, q3 = quartiles(ratios)
    ui_share = ""
    if shares:
        ui_share = (
            f";  UI thread median {statistics.median(shares):.1%} of a core while the lane ran;"
            f"  frames held the models {statistics.median(helds):.1%} of the run's wall time"
        )
    print(
        f"{name}/headless median {median:.3f}  (IQR {q1:.3f}-{q3:.3f}, min {min(ratios):.3f},"
        f" max {max(ratios):.3f}){ui_share}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
