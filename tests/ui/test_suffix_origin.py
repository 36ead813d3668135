"""The playground on a real MLX model with a suffix drafter: its status line says what the drafter
read from the sessions folder as it loaded, and the token drill-down says where each suffix
draft came from: an earlier session, or an earlier run of this playground."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import TextArea

from specplay.cli import main
from specplay.cli.configure import with_earlier_outputs
from specplay.config.run_config import RequestConfig, RunConfig
from specplay.drafters import ModelConfig, parse_model
from specplay.engine.events import RoundEvent
from specplay.engine.settings import SpecSettings
from specplay.store import load_session
from specplay.ui.app import PlaygroundApp
from specplay.ui.protocols import RunState
from specplay.ui.widgets.inspector import Inspector
from specplay.ui.widgets.lane_view import LaneView
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.tiny_models import TinyModels
from tests.support.ui_helpers import app_for, spec_rounds, wait_for


async def test_the_drill_down_says_where_a_suffix_draft_came_from(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = tmp_path / "sessions"
    request = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "32", "--ignore-eos", "--sessions-dir", str(sessions)]
    assert main(["run", "--target", str(tiny.target), "--draft", "mem=suffix", *request, "--save"]) == 0
    (earlier,) = sessions.glob("*.jsonl")
    capsys.readouterr()
    config = RunConfig(
        target=ModelConfig("target", "target", "mlx", str(tiny.target)),
        drafters=(parse_model("mem", "drafter", "suffix", "draft"),),
        request=RequestConfig(prompt=CODE_PROMPT, raw=True, max_tokens=32, ignore_eos=True),
        settings=SpecSettings(route="mem", k=4),
        sessions_dir=sessions,
    )
    app = app_for(with_earlier_outputs(config))
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the models to load")
        status = app.playground.status
        assert "mem (suffix decoding" in status and "it read 32 tokens of 1 earlier output from 1 session" in status

        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the first run to end")
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the lanes to end")
        from_session = [r for r in spec_rounds(app) if r.origin and f"of session {earlier.stem}" in r.origin]
        assert from_session
        shown = await _shown(app, pilot, from_session[0])
        assert f"draft from: {from_session[0].origin}" in shown and "matched" in shown
        # Sessions keep it: the run's session records each round's origin.
        saved = load_session(app.playground.last_session)
        assert [r.origin for r in saved.main.rounds] == [r.origin for r in spec_rounds(app)]

        # Another prompt (its output is new to the memory), then that prompt again: the second time
        # it drafts from the first time's output, which this process remembered as it ended.
        for _ in range(2):
            await pilot.press("ctrl+n")  # a new conversation each time, not a follow-up
            app.query_one("#prompt", TextArea).text = PROSE_PROMPT
            before = app.playground.last_session
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda b=before: app.playground.last_session != b, "the run to end")
            await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the lanes to end")
        remembered = [r for r in spec_rounds(app) if r.origin and "an output of this process (its 1st)" in r.origin]
        assert remembered
        assert f"draft from: {remembered[0].origin}" in await _shown(app, pilot, remembered[0])
        await pilot.press("ctrl+q")


async def _shown(app: PlaygroundApp, pilot: Pilot[None], round: RoundEvent) -> str:
    """The drill-down of the first token of `round`, picked in the speculative lane, its words
    joined again where it wraps them at its width."""
    lane = app.query_one("#speculative", LaneView)
    lane.select(next(p for p in lane.picks if p.round is round).index)
    await pilot.pause()
    return " ".join(str(app.query_one(Inspector).render()).split())
