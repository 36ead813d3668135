"""The README's picture: the playground on real text after a run of its first prompt, a drafted
token's drill-down open. It drives the real app headless at 160 x 50 and saves Textual's SVG and
rsvg-convert's PNG of it.

    python scripts/screenshot_playground.py                    # the models `specplay` opens (SmolLM2 once fetched)
    python scripts/screenshot_playground.py --target demo      # any model flags of `specplay`
    python scripts/screenshot_playground.py --costs            # round costs measured first: the k advice

It pictures the specplay of the checkout it is in, whichever one the interpreter has installed.

Writes docs/images/playground.svg and docs/images/playground.png (needs rsvg-convert);
with --costs, docs/images/playground-costs.svg and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from textual.widgets import TextArea
from textual.widgets.text_area import Selection

ROOT = Path(__file__).resolve().parents[1]
# Run as a file, Python puts scripts/ first on the path, not the checkout: a specplay installed
# from elsewhere (another worktree's editable install) would be the one pictured.
sys.path.insert(0, str(ROOT))

from specplay.cli.configure import run_config  # noqa: E402
from specplay.data.library import library_prompts  # noqa: E402
from specplay.ui.app import PlaygroundOptions, create_app  # noqa: E402
from specplay.ui.controller import RunState  # noqa: E402
from specplay.ui.screenshot import to_png  # noqa: E402
from specplay.ui.widgets.lane_view import LaneView  # noqa: E402

OUT = ROOT / "docs" / "images" / "playground.svg"
SIZE = (160, 50)


async def shoot(flags: dict[str, object], costs: bool) -> str:
    app = create_app(run_config(flags), PlaygroundOptions(autorun=not costs))
    async with app.run_test(size=SIZE) as pilot:
        if costs:  # "Measure round costs" from the palette, then a run: its stats give the k advice
            while app.playground.state != RunState.READY:
                await pilot.pause(0.2)
            app.playground.measure_costs()
            while app.playground.costs is None:
                if app.playground.state == RunState.READY and "not measured" in app.playground.status:
                    raise SystemExit(f"screenshot: {app.playground.status}")
                await pilot.pause(0.2)
            app.action_run()
        while app.playground.last_session is None:
            if app.playground.state == RunState.FAILED:
                raise SystemExit(f"screenshot: {app.playground.status}")
            await pilot.pause(0.2)
        lane = app.query_one("#speculative", LaneView)
        lane.focus()
        drafted = [p.index for p in lane.picks if p.round is not None and p.token.source in ("accepted", "relaxed")]
        if drafted:
            lane.select(drafted[min(5, len(drafted) - 1)])
        # The prompt from its first line: after a run the playground selects it all for a follow-up,
        # which scrolls it to its end.
        prompt = app.query_one("#prompt", TextArea)
        prompt.selection = Selection.cursor((0, 0))
        prompt.scroll_home(animate=False)
        prompt.cursor_blink = False
        await pilot.pause(0.5)
        return app.export_screenshot()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="as for specplay: a fetched name, a GGUF file, a folder, demo")
    parser.add_argument("--draft", action="append", help="as for specplay; repeat")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--costs", action="store_true", help="measure round costs first (the k advice)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as sessions:
        flags: dict[str, object] = {"prompt": library_prompts()[0].text, "max_tokens": args.max_tokens}
        flags |= {"sessions_dir": Path(sessions)}
        flags |= {key: value for key, value in (("target", args.target), ("draft", args.draft)) if value}
        svg = asyncio.run(shoot(flags, args.costs))
    out = OUT.with_name("playground-costs.svg") if args.costs else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg, encoding="utf-8")
    png = to_png(out)
    if png is None:
        print(f"wrote {out}; install rsvg-convert (librsvg2-bin) for the PNG", file=sys.stderr)
        return 1
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
