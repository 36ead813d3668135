"""The playground driven by Textual's Pilot, one feature per test, on the scripted backend."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Select, Static, Switch, TextArea
from textual_slider import Slider

from specplay.config.run_config import RunConfig
from specplay.display.text import visible
from specplay.engine.events import ControlEvent, DoneEvent, StepEvent
from specplay.engine.layout import is_chain
from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.speedup import predict_by_k, recommended_k
from specplay.engine.stream import EventStream
from specplay.errors import ModelError
from specplay.store import list_session_files, load_session
from specplay.ui.app import PlaygroundApp, create_app
from specplay.ui.protocols import RunState
from specplay.ui.widgets.inspector import Inspector
from specplay.ui.widgets.lane_view import LaneView
from specplay.ui.widgets.plots import SPARKS, Plots
from specplay.ui.widgets.tape import DraftTape, rank_mark
from tests.support.checks import every
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import Cost, scripted_backend
from tests.support.ui_helpers import after, scripted_app, scripted_config, spec_rounds, wait_for


def _control_index(app: PlaygroundApp, setting: str, value: object) -> int | None:
    """Where, in the speculative lane's events, `setting` became `value`."""
    for i, event in enumerate(app.playground.events["speculative"]):
        if isinstance(event, ControlEvent) and any(c[0] == setting and c[2] == value for c in event.changes):
            return i
    return None


def live_app(tmp_path: Path, **kwargs: object) -> PlaygroundApp:
    """A playground whose runs last (each target forward really takes 2 ms) and are long enough to
    change while they go; the route pinned to near."""
    backend = scripted_backend(Cost(wall_ms=2.0), drafters=("near", "far"))
    options = {"prompt": CODE_PROMPT, "max_tokens": 5000, "ignore_eos": True, "raw": True} | kwargs
    return scripted_app(backend, tmp_path, **({"settings": SpecSettings(route="near")} | options))


async def start_run(app: PlaygroundApp, pilot: Pilot[None], rounds: int = 3) -> None:
    await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
    await pilot.press("ctrl+r")
    await wait_for(pilot, lambda: len(spec_rounds(app)) >= rounds, "rounds")


async def stop_run(app: PlaygroundApp, pilot: Pilot[None]) -> None:
    await pilot.press("escape")
    await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the lanes to stop")


async def test_type_run_stop_and_save(tmp_path: Path) -> None:
    app = live_app(tmp_path, settings=SpecSettings(), prompt="")
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await pilot.click("#prompt")
        await pilot.press(*"def f(x):")
        assert app.query_one("#prompt", TextArea).text == "def f(x):"
        app.query_one("#route", Select).value = "near"
        await wait_for(pilot, lambda: app.playground.settings.route == "near", "the route to be pinned before the run")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(spec_rounds(app)) >= 3, "rounds at k=4")
        # While lanes generate the prompt's cursor stays lit: each blink would repaint it.
        prompt = app.query_one("#prompt", TextArea)
        await wait_for(pilot, lambda: not prompt.cursor_blink, "the cursor to stay lit during the run")
        handled: list[int] = []
        stop = app.action_stop
        app.action_stop = lambda: (handled.append(len(spec_rounds(app))), stop())[-1]  # type: ignore[method-assign]
        pressed = len(spec_rounds(app))
        await pilot.press("escape")
        # The key is handled at once, however busy the lanes are (events reach the UI in batches):
        # counted in the lanes' own rounds, not in wall time, which a loaded machine stretches.
        assert handled and handled[0] - pressed <= 1, (pressed, handled)
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the lanes to stop")
        await wait_for(pilot, lambda: prompt.cursor_blink, "the cursor to blink again once the run ended")
        assert every(r.nodes == 4 and r.drafter == "near" for r in spec_rounds(app))
        for lane in ("speculative", "target"):
            final = app.playground.events[lane][-1]
            assert isinstance(final, DoneEvent) and final.finish_reason == "cancelled"
        assert app.playground.last_session is not None
        session = load_session(app.playground.last_session)
        assert session.complete and list(session.header["lanes"]) == ["speculative", "target"]
        assert session.prompt == "def f(x):"
        assert [p.name for p in list_session_files(tmp_path)] == [app.playground.last_session.name]


async def test_the_k_slider_changes_the_next_rounds_and_marks_the_stream(tmp_path: Path) -> None:
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#k", Slider).value = 2
        await wait_for(pilot, lambda: _control_index(app, "k", 2) is not None, "the k change to take effect")
        k_at = _control_index(app, "k", 2)
        assert k_at is not None
        await wait_for(pilot, lambda: len(after(app.playground.events["speculative"], k_at)) >= 3, "rounds at k=2")
        await stop_run(app, pilot)
        events = app.playground.events["speculative"]
        assert every(r.nodes == 4 for r in spec_rounds(app)[:3]) and every(r.nodes == 2 for r in after(events, k_at))
        change = events[k_at]
        assert isinstance(change, ControlEvent) and ("k", 4, 2) in change.changes
        assert "⟨k=2⟩" in app.query_one("#speculative", LaneView).text  # the marker in the stream
        # Only sampling changes reach the target-only lane.
        assert not any(isinstance(e, ControlEvent) for e in app.playground.events["target"])


async def test_the_route_select_changes_the_drafter_of_the_next_rounds(tmp_path: Path) -> None:
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#route", Select).value = "far"
        await wait_for(pilot, lambda: _control_index(app, "route", "far") is not None, "the route change")
        route_at = _control_index(app, "route", "far")
        assert route_at is not None
        await wait_for(pilot, lambda: len(after(app.playground.events["speculative"], route_at)) >= 2, "far rounds")
        await stop_run(app, pilot)
        events = app.playground.events["speculative"]
        assert every(r.drafter == "near" for r in spec_rounds(app)[:3])
        assert every(r.drafter == "far" for r in after(events, route_at))


async def test_the_knob_moves_the_tv_budget_and_relaxes_acceptance(tmp_path: Path) -> None:
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#knob", Slider).value = 10
        await wait_for(pilot, lambda: _control_index(app, "tv_budget", 0.5) is not None, "the TV budget change")
        tv_at = _control_index(app, "tv_budget", 0.5)
        assert tv_at is not None
        await wait_for(pilot, lambda: len(after(app.playground.events["speculative"], tv_at)) >= 3, "relaxed rounds")
        await stop_run(app, pilot)
        before, relaxed = spec_rounds(app)[:3], after(app.playground.events["speculative"], tv_at)
        assert every(p.theta == 0 for r in before for p in r.positions if p.tv_distance > 0)
        assert every(p.theta > 0 for r in relaxed for p in r.positions if p.tv_distance > 0)


async def test_the_width_select_turns_the_next_rounds_into_trees_drawn_on_the_tape(tmp_path: Path) -> None:
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#width", Select).value = 3
        await wait_for(pilot, lambda: _control_index(app, "width", 3) is not None, "the width change")
        width_at = _control_index(app, "width", 3)
        assert width_at is not None
        await wait_for(pilot, lambda: len(after(app.playground.events["speculative"], width_at)) >= 3, "tree rounds")
        # With a tree on, a relaxed rule is refused in one line and the settings stay lossless.
        app.query_one("#knob", Slider).value = 10
        await pilot.pause()
        assert app.playground.settings.rule_params.tv_budget == 0
        await stop_run(app, pilot)
        events = app.playground.events["speculative"]
        assert every(is_chain(r.parents) for r in spec_rounds(app)[:3])
        trees = after(events, width_at)
        assert any(not is_chain(r.parents) for r in trees)
        tape = str(app.query_one(DraftTape).query_one(Static).render())
        # the kept path, and the siblings that lost below it
        assert " nodes │" in tape and "╰ " in tape and "tree" not in tape
        assert any("judged losslessly only" in n.message for n in app._notifications)


@pytest.mark.parametrize("order", [("width", "rule"), ("rule", "width")])
async def test_a_tree_under_typical_acceptance_is_refused_in_a_notification_in_either_order(
    tmp_path: Path, order: tuple[str, str]
) -> None:
    """Width 2 and the typical rule cannot go together (typical relaxes acceptance, and siblings are
    judged losslessly only): whichever comes second is refused in a notification, the settings stay
    as they were, and the run goes on."""
    app = live_app(tmp_path)
    picks = {"width": 2, "rule": "typical"}
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        first, second = order
        app.query_one(f"#{first}", Select).value = picks[first]
        await wait_for(pilot, lambda: _control_index(app, first, picks[first]) is not None, f"the {first} change")
        kept = app.playground.settings
        app.query_one(f"#{second}", Select).value = picks[second]
        await wait_for(pilot, lambda: bool(app._notifications), "the refusal")
        assert any("losslessly only" in n.message for n in app._notifications), [n.message for n in app._notifications]
        assert app.playground.settings == kept
        rounds = len(spec_rounds(app))
        await wait_for(pilot, lambda: len(spec_rounds(app)) > rounds + 2, "more rounds after the refusal")
        await stop_run(app, pilot)
        assert _control_index(app, second, picks[second]) is None
    assert app.crash is None


async def test_counterfactual_routes_turn_on_live_and_show_the_regret(tmp_path: Path) -> None:
    """Every other drafter judged each round, shown beside the route."""
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#counterfactual", Switch).value = True
        await wait_for(pilot, lambda: any(r.counterfactuals for r in spec_rounds(app)), "counterfactual rounds")
        stats = app.query_one("#route-stats", Static)
        await wait_for(pilot, lambda: "route regret" in str(stats.render()), "the counterfactual stats")
        assert every(name in str(stats.render()) for name in ("near", "far"))
        await stop_run(app, pilot)


async def test_adaptive_routing_turns_on_live_and_shows_the_drafters_that_served(tmp_path: Path) -> None:
    """From `adaptive` on, rounds pick their drafter: `far`, never tried, serves a round at once;
    beside the route the rounds each drafter served and the switches show."""
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#route", Select).value = "adaptive"
        await wait_for(pilot, lambda: _control_index(app, "route", "adaptive") is not None, "the route change")
        await wait_for(pilot, lambda: any(r.drafter == "far" for r in spec_rounds(app)), "a round drafted by far")
        stats = app.query_one("#route-stats", Static)
        await wait_for(pilot, lambda: "switches" in str(stats.render()), "the route stats")
        await stop_run(app, pilot)
        shown = str(stats.render())
        assert "near" in shown and "far" in shown
        assert every(r.drafter == "near" for r in spec_rounds(app)[:3])


async def test_another_rule_takes_the_knob(tmp_path: Path) -> None:
    """The rule select swaps the slider's knob: lenience's lambda doubles every 4 steps."""
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await start_run(app, pilot)
        app.query_one("#rule", Select).value = "lenience"
        await wait_for(pilot, lambda: _control_index(app, "rule", "lenience") is not None, "the rule change")
        app.query_one("#knob", Slider).value = 8
        await wait_for(pilot, lambda: _control_index(app, "lenience", 4.0) is not None, "the lenience change")
        assert "lenience λ 4" in str(app.query_one("#knob-label").render())
        lenience_at = _control_index(app, "lenience", 4.0)
        assert lenience_at is not None
        await wait_for(
            pilot, lambda: len(after(app.playground.events["speculative"], lenience_at)) >= 2, "lenience rounds"
        )
        await stop_run(app, pilot)
        rule_at = _control_index(app, "rule", "lenience")
        assert rule_at is not None
        lenient = after(app.playground.events["speculative"], rule_at)
        assert lenient and every(p.theta == 0 for r in lenient for p in r.positions)  # theta is mentored decoding's


async def test_ctrl_t_cycles_the_themes(tmp_path: Path) -> None:
    app = live_app(tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        before = app.theme_variables["spec-accepted"]
        await pilot.press("ctrl+t")
        assert app.theme != "specplay-dark" and app.theme_variables["spec-accepted"] != before


async def test_autorun_to_the_end_shows_stats_and_saves(tmp_path: Path) -> None:
    app = scripted_app(scripted_backend(), tmp_path, prompt=CODE_PROMPT, autorun=True, max_tokens=30, raw=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end and be saved")
        for lane in ("speculative", "target"):
            final = app.playground.events[lane][-1]
            assert isinstance(final, DoneEvent) and final.finish_reason == "length" and len(final.token_ids) == 30
        speculative, target = app.playground.tallies["speculative"], app.playground.tallies["target"]
        assert speculative.tokens == target.tokens == 30 and speculative.rounds > 0
        assert speculative.alpha is not None and speculative.tokens_per_s and target.tokens_per_s
        stats = str(app.query_one("#speculative", LaneView).query_one(".lane-stats").render())
        assert "predicted" in stats and "mean acceptance length" in stats and "–× predicted" not in stats
        assert app.playground.last_session is not None
        session = load_session(app.playground.last_session)
        assert session.complete and session.header["request"]["max_tokens"] == 30


async def test_a_load_error_is_one_line_and_the_app_still_quits(tmp_path: Path) -> None:
    def missing(config: RunConfig) -> EventStream:
        raise ModelError("no model at no-such-model:\nfetch it first")

    app = create_app(scripted_config(scripted_backend(), tmp_path), open_stream=missing)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.FAILED, "the load to fail")
        assert "no-such-model" in app.playground.status and "\n" not in app.playground.status
        await pilot.press("ctrl+r")  # refused, the app stays up
        assert app.playground.state == RunState.FAILED
        await pilot.press("ctrl+q")
    assert app.return_code == 0


async def test_the_tape_shows_each_rejections_rank(tmp_path: Path) -> None:
    # `far` is a model of its own: most of its drafts are rejected, each with its correction's rank.
    settings = SpecSettings(k=3, route="far")
    backend = scripted_backend(drafters=("near", "far"))
    app = scripted_app(backend, tmp_path, prompt=CODE_PROMPT, autorun=True, max_tokens=24, raw=True, settings=settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        shown = str(app.query_one(DraftTape).query_one(Static).render()).splitlines()
        rounds = spec_rounds(app)
        assert len(shown) == len(rounds)
        marks = "¹²³⁴⁵⁺"
        for line, event in zip(shown, rounds, strict=True):
            ranks = [p.correction_rank for p in event.positions if p.outcome == "rejected"]
            drafted = line.split("│ ")[1].split(" → ")[0]
            assert "".join(c for c in drafted if c in marks) == "".join(rank_mark(p) for p in event.positions)
            assert bool(ranks) == any(c in marks for c in drafted) and None not in ranks
        assert any(p.outcome == "rejected" for r in rounds for p in r.positions)


async def test_drill_down_on_a_token_by_click_and_keys(tmp_path: Path) -> None:
    settings = SpecSettings(k=4, route="near", sampling=SamplingParams(temperature=1.0))
    backend = scripted_backend(drafters=("near", "far"))
    app = scripted_app(backend, tmp_path, prompt=CODE_PROMPT, autorun=True, max_tokens=24, raw=True, settings=settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        lane, inspector = app.query_one("#speculative", LaneView), app.query_one(Inspector)
        await pilot.click("#speculative .lane-text", offset=(0, 0))
        await wait_for(pilot, lambda: inspector.pick is not None, "the clicked token to be shown")
        first_shown = next(p.index for p in lane.picks if visible(p.token.text))  # empty text takes no cell
        assert lane.selected == first_shown and inspector.pick is not None and inspector.pick.index == first_shown
        pick = inspector.pick
        assert pick.round is not None and pick.round.index == 0
        text = str(inspector.render())
        for label in ("p_target(x)", "p_draft(x)", "u ", "d = TV", "θ", "top p_target", "top p_draft", "round 0"):
            assert label in text, label

        await pilot.press("right", "right")
        assert lane.selected == first_shown + 2 and inspector.pick is not None
        assert inspector.pick.index == first_shown + 2
        await pilot.press("end")
        last = inspector.pick
        assert last is not None and last.index == len(lane.picks) - 1
        # Every drafted position carries both top-5 lists; the shown rows are those lists.
        rounds = spec_rounds(app)
        assert every(p.top_target and p.top_draft for r in rounds for p in r.positions)
        assert any(len(p.top_target or ()) == 5 for r in rounds for p in r.positions)
        drafted = next(p for p in lane.picks if p.round is not None and p.slot < len(p.round.positions))
        lane.select(drafted.index)
        await pilot.pause()
        assert drafted.round is not None
        position = drafted.round.positions[drafted.slot]
        shown = str(inspector.render())
        assert f"p_target(x) {position.p_target:.3f}" in shown and f"u {position.uniform:.3f}" in shown
        assert every(f"{prob:.3f}" in shown for _, prob in [*(position.top_target or ()), *(position.top_draft or ())])
        lane.select(last.index)
        await pilot.press("left")
        assert inspector.pick is not None and inspector.pick.index == last.index - 1
        # A bonus token shows the target's distribution where it was drawn.
        bonus = next((p for p in lane.picks if p.token.source == "bonus"), None)
        if bonus is not None:
            lane.select(bonus.index)
            await pilot.pause()
            assert "bonus" in str(inspector.render()) and "top p_target" in str(inspector.render())


async def test_draft_lane_prompt_library_and_palette_actions(tmp_path: Path) -> None:
    app = scripted_app(scripted_backend(drafters=("near", "far")), tmp_path, max_tokens=16, raw=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        commands = {c.title for c in app.get_system_commands(app.screen)}
        for title in ("Run", "Stop", "Next theme", "Draft-only lane", "Inspect a token", "Prompt library"):
            assert title in commands, title
        assert any(t.startswith("Prompt: ") for t in commands)
        footer_keys = {b.key for b in app.BINDINGS if isinstance(b, Binding) and b.show}
        assert {"ctrl+r", "escape", "ctrl+t", "ctrl+q", "f2", "f3", "f4"} <= footer_keys

        app.query_one("#library", Select).value = 0  # the prompt picker fills the editor
        await pilot.pause()
        assert app.query_one("#prompt", TextArea).text == app.main.library[0].text
        await pilot.press("f2")  # the draft-only lane
        await wait_for(pilot, lambda: app.playground.draft_lane, "the draft lane switch")
        assert app.query_one("#draft", LaneView).display
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the three-lane run to end")
        draft_done = app.playground.events["draft"][-1]
        assert isinstance(draft_done, DoneEvent) and len(draft_done.token_ids) == 16
        assert every(e.token.source == "draft" for e in app.playground.events["draft"] if isinstance(e, StepEvent))
        assert app.query_one("#draft", LaneView).text
        assert list(load_session(app.playground.last_session).header["lanes"]) == ["speculative", "target", "draft"]
        plots = str(app.query_one(Plots).render())
        assert "acceptance by draft position" in plots and "tokens/s over time" in plots and " 1 " in plots
        assert any(c in plots for c in SPARKS)
        commands = {c.title for c in app.get_system_commands(app.screen)}
        opened = [c for c in commands if c.startswith(f"Open session {app.playground.last_session.stem}: ")]
        assert opened and app.main.library[0].text.split()[0] in opened[0]  # the prompt's beginning beside the id

        # Screenshots: one palette command (ours, not Textual's), and f12; both land beside the sessions
        (screenshot,) = [c for c in app.get_system_commands(app.screen) if c.title == "Screenshot"]
        folder = tmp_path / "screenshots"
        assert str(folder) in screenshot.help
        screenshot.callback()
        await pilot.press("f12")
        await wait_for(pilot, lambda: len(list(folder.glob("*.svg"))) == 2, "two screenshots")
        for svg in folder.glob("*.svg"):
            assert svg.read_text(encoding="utf-8").lstrip().startswith("<svg")
        if not shutil.which("rsvg-convert"):
            assert not list(folder.glob(".*"))  # no half-written file left
            pytest.skip("rsvg-convert is not installed (librsvg2-bin): the screenshots' PNGs go unchecked")
        await wait_for(pilot, lambda: len(list(folder.glob("*.png"))) == 2, "their PNGs")
        assert every(png.read_bytes().startswith(b"\x89PNG") for png in folder.glob("*.png"))
        assert not list(folder.glob(".*"))  # no half-written file left


async def test_tab_goes_from_the_prompt_to_the_controls_and_they_fit_at_180_by_50(tmp_path: Path) -> None:
    app = scripted_app(
        scripted_backend(drafters=("near", "far")), tmp_path, prompt=CODE_PROMPT, raw=True, max_tokens=24
    )
    async with app.run_test(size=(180, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        controls = [
            "k",
            "rule",
            "knob",
            "policy",
            "route",
            "width",
            "counterfactual",
            "temperature",
            "seed",
            "draft-lane",
        ]
        expected = ["prompt", "library", *controls, "speculative", "tape"]

        def focus_chain() -> list[str | None]:
            return [widget.id for widget in app.screen.focus_chain]

        # The chain follows the layout, which a loaded machine may draw a frame after the load.
        await wait_for(pilot, lambda: focus_chain() == expected, f"the focus chain {expected} (now {focus_chain()})")
        chain = focus_chain()
        # every control, the seed and the draft-only switch included, is on screen without scrolling
        panel = app.query_one("#controls")
        assert panel.max_scroll_y == 0
        assert every(panel.region.contains_region(app.query_one(f"#{id}").region) for id in controls)

        # each stop shows that it has the focus: its look changes
        def look(region: Region) -> list[Style]:
            return [
                app.screen.get_style_at(x, y)
                for y in range(region.y, region.bottom)
                for x in range(region.x, region.right)
            ]

        for id in chain:
            widget = app.query_one(f"#{id}")
            app.screen.set_focus(None)
            await pilot.pause()
            before = look(widget.region)
            widget.focus()
            await pilot.pause()
            assert look(widget.region) != before, id
        # after a run the plots fill in below the controls, and the controls still fit
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        assert panel.max_scroll_y == 0 and "acceptance by draft position" in str(app.query_one(Plots).render())


async def test_the_palette_sets_controls_and_exports_the_run(tmp_path: Path) -> None:
    backend = scripted_backend(drafters=("near", "far"))
    app = scripted_app(backend, tmp_path, prompt=CODE_PROMPT, max_tokens=12, raw=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")

        def command(title: str):  # type: ignore[no-untyped-def]
            (found,) = [c for c in app.get_system_commands(app.screen) if c.title == title]
            return found.callback

        assert not [c for c in app.get_system_commands(app.screen) if c.title.startswith("Export")]  # nothing run yet
        command("Set k (draft length) = 6")()
        command("Set route: far")()
        command("Set temperature: 0.7")()

        def set_from_the_palette() -> bool:
            settings = app.playground.settings
            return (settings.k, settings.route, settings.sampling.temperature) == (6, "far", 0.7)

        await wait_for(pilot, set_from_the_palette, "k, route and temperature from the palette")
        assert app.query_one("#k", Slider).value == 6  # the control shows what the palette set

        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        saved = app.playground.last_session
        assert saved is not None
        command("Export a review page")()
        command("Export a Markdown transcript")()
        page, transcript = (tmp_path / "reviews" / f"{saved.stem}.{fmt}" for fmt in ("html", "md"))
        await wait_for(pilot, lambda: page.exists() and transcript.exists(), "the exports")
        assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        assert "| `k` | 6 |" in transcript.read_text(encoding="utf-8")


async def test_measured_round_costs_say_which_k_would_pay(tmp_path: Path) -> None:
    backend = scripted_backend(Cost(step_ms=10.0, row_ms=1.0), drafters=("near", "far"))
    settings = SpecSettings(k=8, route="near")
    app = scripted_app(backend, tmp_path, prompt=CODE_PROMPT, max_tokens=48, raw=True, settings=settings)
    async with app.run_test(size=(180, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        (measure,) = [c for c in app.get_system_commands(app.screen) if c.title == "Measure round costs"]
        measure.callback()
        await wait_for(pilot, lambda: app.playground.costs is not None, "the costs")
        costs = app.playground.costs
        assert costs is not None and app.playground.state == RunState.READY
        # on the scripted clock a forward over n rows costs 10 + n ms: the curve is exact
        assert {rows: t.ms for rows, t in costs.verify_ms.items()} == {n: pytest.approx(10.0 + n) for n in range(1, 10)}
        # and the routed drafter's rounds at k 1 and 8: a drafted token's forward, 2 + 0.2 ms
        assert costs.draft_step_in_rounds_ms == {"near": pytest.approx(2.2, rel=0.02)}
        assert "round costs measured" in app.playground.status

        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        tally = app.playground.tallies["speculative"]
        verify = {rows: t.ms for rows, t in costs.verify_ms.items()}
        best = recommended_k(
            predict_by_k(tally.acceptance_per_position(), verify, costs.step_for_rounds_ms("near"), 11.0, k_max=8)
        )
        assert best is not None
        stats = app.query_one("#speculative", LaneView).query_one(".lane-stats", Static).render()
        # within 0.03: this estimate leaves out the host's work and the draft call, which the lane counts
        shown = re.search(r"k 8 → [\d.]+×(?:; k (\d+) would give ([\d.]+)×| .*the best k here)", str(stats))
        assert shown is not None, str(stats)
        if best.k == 8:
            assert shown[1] is None
        else:
            assert int(shown[1]) == best.k and float(shown[2]) == pytest.approx(best.speedup, abs=0.03)
        plots = str(app.query_one(Plots).render())
        assert "verify by rows, 1..9" in plots and "▲ k 8" in plots


async def test_a_saved_session_opens_read_only_and_re_runs(tmp_path: Path) -> None:
    settings = SpecSettings(
        k=3, route="near", rule_params=RuleParams(tv_budget=0.25), sampling=SamplingParams(temperature=0.7)
    )
    backend = scripted_backend(drafters=("near", "far"))
    first = scripted_app(
        backend, tmp_path, prompt=CODE_PROMPT, autorun=True, max_tokens=20, raw=True, seed=7, settings=settings
    )
    async with first.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: first.playground.last_session is not None, "the first run to end")
        saved, text = first.playground.last_session, first.query_one("#speculative", LaneView).text
        assert saved is not None

    app = scripted_app(backend, tmp_path, raw=True, max_tokens=20, open_session=saved)
    async with app.run_test(size=(160, 50)) as pilot:
        assert app.playground.opened is not None and app.query_one("#prompt", TextArea).text == CODE_PROMPT
        assert app.query_one("#speculative", LaneView).text == text  # shown before the models load
        assert app.playground.tallies["speculative"].rounds == first.playground.tallies["speculative"].rounds
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        assert (
            app.playground.settings == settings and app.playground.seed == 7
        )  # the controls now hold the session's settings
        assert "read-only" in app.playground.status
        app.action_rerun_session()
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the re-run to end")
        assert app.query_one("#speculative", LaneView).text == text  # same seed and settings, same tokens
        assert app.playground.opened is None and app.playground.last_session != saved


async def test_the_palette_shows_a_sessions_prompt_as_text(tmp_path: Path) -> None:
    """A prompt with brackets (code, or markup on purpose) is shown as written beside its id."""
    from textual.content import Content

    from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    prompt = "xs = [x[0] for x in rows] [bold]y[/bold] ["
    saved = write_session(tmp_path, lanes, prompt=prompt)
    app = scripted_app(scripted_backend(drafters=("near", "far")), tmp_path, raw=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        (title,) = [c.title for c in app.get_system_commands(app.screen) if c.title.startswith("Open session")]
        assert (
            Content.from_markup(title).plain == f"Open session {saved.stem}: xs = [x[0] for x in rows] [bold]y[/bold] ["
        )
