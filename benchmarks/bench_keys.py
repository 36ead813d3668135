"""Key-to-screen latency in the playground: typing in the prompt while no run goes, and while a run
goes on the model thread (the case a learner felt lag in).

The real app runs headless (`app.run_test()`). Each key is posted as a terminal would send it; its
latency is the time from posting it to the end of the first screen refresh after the prompt
holds the character (`call_after_refresh`): what a person sees. Keys alternate with backspaces,
so the prompt keeps its length. The idle phase runs twice, before and after the run, as an A/A
control: two readings of the same thing, which say how far apart equal sides read here.

    python -m benchmarks.bench_keys                    # the models `specplay` opens
    python -m benchmarks.bench_keys --target demo --keys 60
    python -m benchmarks.bench_keys --load             # a busy process on one core meanwhile

Absolute milliseconds depend on the machine; the issue's bar is a median under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from dataclasses import replace

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
from textual import events
from textual.widgets import TextArea

from specplay.cli.configure import run_config
from specplay.data.library import library_prompts
from specplay.ui.app import PlaygroundApp, create_app
from specplay.ui.protocols import RunState

GAP_S = 0.15
"""Between keys: a fast typist's pace, so each key meets the app mid-work, not queued behind the last."""


def _busy() -> None:
    while True:
        pass


async def _latency_ms(app: PlaygroundApp, key: str, character: str | None, done_when: object) -> float:
    """Post one key; the milliseconds until a refresh after the prompt changed."""
    prompt = app.query_one("#prompt", TextArea)
    refreshed = asyncio.Event()
    start = time.perf_counter()
    app.post_message(events.Key(key, character))
    while not done_when(prompt.text):  # type: ignore[operator]
        await asyncio.sleep(0.0005)
    app.call_after_refresh(refreshed.set)
    await refreshed.wait()
    return 1000 * (time.perf_counter() - start)


async def _type(app: PlaygroundApp, keys: int) -> list[float]:
    out = []
    prompt = app.query_one("#prompt", TextArea)
    prompt.focus()
    prompt.move_cursor(prompt.document.end)
    for _ in range(keys // 2):
        before = prompt.text
        out.append(await _latency_ms(app, "x", "x", lambda text, b=before: text == b + "x"))
        await asyncio.sleep(GAP_S)
        out.append(await _latency_ms(app, "backspace", None, lambda text, b=before: text == b))
        await asyncio.sleep(GAP_S)
    return out


def _line(name: str, values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"{name:<28} median {statistics.median(values):7.1f} ms   p90 {q[-1]:7.1f} ms   max {max(values):7.1f} ms"


async def measure(args: argparse.Namespace) -> None:
    flags = {"target": args.target} if args.target else {}
    config = run_config(flags)
    # The playground's first prompt, as `specplay` opens with it (a run needs one).
    prompt = library_prompts()[0].text
    config = replace(
        config, request=replace(config.request, prompt=prompt, max_tokens=args.max_tokens, ignore_eos=True)
    )
    app = create_app(config)
    async with app.run_test(size=(160, 50)) as pilot:
        while app.playground.state != RunState.READY:
            assert app.playground.state != RunState.FAILED, app.playground.status
            await pilot.pause(0.1)
        await pilot.pause(1.0)
        idle_before = await _type(app, args.keys)
        app.action_run()
        if app.playground.state != RunState.RUNNING:
            raise SystemExit(f"bench_keys: the run did not start: {app.playground.status}")
        await asyncio.sleep(1.0)  # the run under way: prefill done, lanes taking turns
        running = await _type(app, args.keys)
        still = app.playground.state.generating
        app.action_stop()
        while app.playground.state.generating:
            await asyncio.sleep(0.05)
        idle_after = await _type(app, args.keys)
    print(f"models: {config.target.location}; {args.keys} keys a phase, {GAP_S * 1000:.0f} ms apart")
    print(_line("idle (before the run)", idle_before))
    print(_line("idle again (A/A control)", idle_after))
    print(_line("while a run goes", running) + ("" if still else "   (the run ended before the last key)"))
    ratio = statistics.median(running) / statistics.median(idle_before)
    control = statistics.median(idle_after) / statistics.median(idle_before)
    print(f"running / idle median: {ratio:.2f}   (A/A: {control:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", help="as `specplay --target` (default: the models `specplay` opens)")
    parser.add_argument("--keys", type=int, default=40, help="keys a phase, half of them backspaces (default 40)")
    parser.add_argument("--max-tokens", type=int, default=2000, help="the run's length, kept longer than the typing")
    parser.add_argument("--load", action="store_true", help="keep one core busy with another process meanwhile")
    args = parser.parse_args()
    busy = multiprocessing.Process(target=_busy, daemon=True) if args.load else None
    if busy is not None:
        busy.start()
    try:
        asyncio.run(measure(args))
    finally:
        if busy is not None:
            busy.kill()


if __name__ == "__main__":
    main()
