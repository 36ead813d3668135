"""The playground's pure parts: statistics, the predicted speedup, themes, the command line."""

from __future__ import annotations

import os
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from textual.color import Color
from textual.content import Content
from textual.visual import VisualType
from textual.widgets import Static

from specplay.cli import main
from specplay.display.themes import builtin_theme_files, themes_dir
from specplay.engine.conversation import Exchange
from specplay.engine.events import DoneEvent, DraftPosition, RoundEvent, StepEvent, Token
from specplay.engine.layout import chain
from specplay.engine.rules import KNOB_STEPS, RULES, Cascade, Lenience, Mentored, Typical
from specplay.engine.speedup import predicted_speedup
from specplay.ui.lane_board import LaneBoard
from specplay.ui.stats import LaneTally, compare, conversation_figures
from specplay.ui.theming import TOKEN_VARIABLES, ThemeError, load_themes, theme_from_toml
from specplay.ui.turns import Conversation
from specplay.ui.widgets.controls_panel import step_from_knob
from specplay.ui.widgets.steady import steady_update
from tests.support.checks import every


def _round(outcomes: list[str], draft_ms: float = 4.0) -> RoundEvent:
    positions = tuple(DraftPosition(1, 0.5, 0.5, 0.1, 0.2, 0.0, o) for o in outcomes)  # type: ignore[arg-type]
    accepted = sum(o == "accepted" for o in outcomes)
    last = "corrected" if "rejected" in outcomes else "bonus"
    tokens = (*(Token(1, "a", "accepted") for _ in range(accepted)), Token(2, "b", last))
    return RoundEvent(
        0, 0, "near", (1,) * len(outcomes), chain(len(outcomes)), positions, accepted, tokens, draft_ms, 1, 0
    )


def test_predicted_speedup_matches_leviathan() -> None:
    assert predicted_speedup(0.0, 4, 0.0) == 1.0  # nothing accepted, free drafts: one token per round
    assert predicted_speedup(1.0, 4, 0.0) == 5.0  # everything accepted: k + 1 per target pass
    assert predicted_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / (0.2 * 1.2))


def test_alpha_counts_only_judged_positions() -> None:
    speculative, target = LaneTally(), LaneTally()
    speculative.add(_round(["accepted", "rejected", "unreached", "unreached"]), busy_s=1.0)
    speculative.add(_round(["accepted", "accepted", "accepted", "accepted"]), busy_s=2.0)
    assert speculative.alpha == pytest.approx(5 / 6)  # 5 accepted of 6 judged
    assert speculative.draft_acceptance_rate == pytest.approx(5 / 8)  # of 8 drafted
    assert speculative.mean_acceptance_length == pytest.approx(1 + 5 / 2)
    # the engine's one definition: the 5 tokens after the first round's 2, over 1 s since them
    assert speculative.tokens == 7 and speculative.tokens_per_s == pytest.approx(5.0)
    for i in range(4):
        target.add(StepEvent(i, None, Token(1, "a", "target"), step_ms=2.0), busy_s=0.5 * (i + 1))
    assert target.tokens_per_s == pytest.approx(3 / 1.5)
    comparison = compare(speculative, target)
    p = comparison.prediction
    assert p.cost_ratio == pytest.approx(1.0 / 2.0)  # 1 ms per drafted token over a 2 ms step
    assert comparison.speedup == pytest.approx(5.0 / 2.0)
    assert p.speedup == pytest.approx(predicted_speedup(5 / 6, 4, 0.5))
    # each round: verify 1 ms and no host work against 2 ms target steps
    assert p.verify_steps == pytest.approx(0.5) and p.host_steps == 0
    assert p.costed_speedup == pytest.approx(p.speedup * (4 * 0.5 + 1) / (4 * 0.5 + 0.5))


def test_the_rounds_account_is_the_measured_speedup_taken_apart() -> None:
    """Over the span tokens/s counts (after the first token's round or step, up to the last
    token's): where each event's times add up to the time since the one before, as the engine
    times them, the account's speedup is the measured one, whatever the first round and a final
    round that commits nothing (an end of sequence) cost."""

    def timed_round(tokens: int, draft_ms: float, verify_ms: float, host_ms: float) -> RoundEvent:
        made = tuple(Token(1, "a", "accepted") for _ in range(tokens))
        return RoundEvent(0, 0, "near", (1,) * 4, chain(4), (), tokens - 1, made, draft_ms, verify_ms, host_ms)

    speculative, target = LaneTally(), LaneTally()
    busy_s = 0.0
    for tokens, draft_ms, verify_ms, host_ms in [(3, 50, 400, 5), (5, 20, 120, 10), (2, 20, 110, 20), (0, 1, 90, 1)]:
        busy_s += (draft_ms + verify_ms + host_ms) / 1000
        speculative.add(timed_round(tokens, draft_ms, verify_ms, host_ms), busy_s)
    busy_s = 0.0
    for step_ms in (300.0, 100.0, 100.0, 100.0):  # the first step follows the prefill
        busy_s += step_ms / 1000
        target.add(StepEvent(0, None, Token(1, "a", "target"), step_ms=step_ms), busy_s)
    assert target.mean_step_ms == pytest.approx(100.0)  # the steps tokens/s counts
    comparison = compare(speculative, target)
    account = comparison.account
    assert account is not None and comparison.speedup is not None
    assert (account.draft_steps, account.verify_steps, account.host_steps) == pytest.approx((0.2, 1.15, 0.15))
    assert account.tokens == pytest.approx((10 - 3) / 2)  # the first round's 3 came before the span
    assert account.speedup == pytest.approx(comparison.speedup)  # (7 / 0.3 s) over (3 / 0.3 s)


def test_a_lane_shows_the_speed_and_first_token_time_its_run_records() -> None:
    """While the lane runs: the engine's definition on the lane's clock; once it ends: what the
    run's end recorded, the number its session keeps."""
    from specplay.engine.events import DoneEvent, StartEvent
    from specplay.engine.settings import SpecSettings

    lane = LaneTally()
    lane.add(StartEvent("target", None, None, (1,), 0, SpecSettings()), busy_s=0.0)
    lane.add(StepEvent(0, None, Token(1, "a", "target"), step_ms=900.0), busy_s=0.9)  # prefill and a step
    lane.add(StepEvent(1, None, Token(1, "a", "target"), step_ms=100.0), busy_s=1.0)
    lane.add(StepEvent(2, None, Token(1, "a", "target"), step_ms=100.0), busy_s=1.1)
    assert lane.tokens_per_s == pytest.approx(2 / 0.2)  # not 3 tokens over 1.1 s
    assert lane.time_to_first_token_s == pytest.approx(0.9)
    lane.add(DoneEvent("length", (1, 1, 1), "aaa", {"tokens_per_s": 9.5, "time_to_first_token_ms": 880.0}), 1.1)
    assert lane.tokens_per_s == 9.5 and lane.time_to_first_token_s == pytest.approx(0.88)


def test_the_first_token_time_counts_the_prefill_before_the_start_event() -> None:
    """The engine starts its clock before the prefill and says it started after it: the lane's
    first-token time counts from the lane's start, as the run's end records it."""
    from specplay.engine.events import StartEvent
    from specplay.engine.settings import SpecSettings

    lane = LaneTally()
    lane.add(StartEvent("target", None, None, (1,), 0, SpecSettings()), busy_s=0.8)  # after a 0.8 s prefill
    lane.add(StepEvent(0, None, Token(1, "a", "target"), step_ms=100.0), busy_s=0.9)
    assert lane.time_to_first_token_s == pytest.approx(0.9)  # not 0.1


def test_remote_lanes_model_the_speedup_and_sum_the_error_bounds() -> None:
    speculative = LaneTally()
    bounded = tuple(
        DraftPosition(1, 0.5, 0.5, 0.1, 0.2, 0.0, outcome, 0.1, bound)  # type: ignore[arg-type]
        for outcome, bound in (("accepted", 0.01), ("rejected", 0.02), ("unreached", 0.5))
    )
    tokens = (Token(1, "a", "accepted"), Token(2, "b", "corrected"))
    speculative.add(RoundEvent(0, 0, "near", (1, 1, 1), chain(3), bounded, 1, tokens, 6.0, 12.0, 0), busy_s=1.0)
    speculative.add(_round(["accepted", "accepted"], draft_ms=4.0), busy_s=2.0)  # verify_ms 1
    assert speculative.error_bound_total == pytest.approx(0.03)  # unreached positions emitted nothing
    comparison = compare(speculative, None)
    p = comparison.prediction
    assert comparison.speedup is None  # HTTP round trips are not speculative speed
    assert p.cost_ratio == pytest.approx((10.0 / 5) / (13.0 / 2))  # per drafted token / per verify
    assert p.speedup == pytest.approx(predicted_speedup(3 / 4, 2.5, p.cost_ratio))
    assert LaneTally().error_bound_total is None
    # `specplay run --json` models the same speedup from the lane's metrics as the playground does
    from specplay.backends.vllm.report import inspection_report

    report = inspection_report(speculative.counters.to_dict() | {"vllm": {"approximate": True}})
    assert report["cost_ratio"] == pytest.approx(p.cost_ratio)
    assert report["modelled_speedup"] == pytest.approx(p.speedup)


def test_knob_slider_steps_are_exact_and_run_from_lossless_to_loose() -> None:
    assert [Mentored().slider_value(s) for s in (0, 1, 10, 20)] == [0.0, 0.05, 0.5, 1.0]
    assert [Lenience().slider_value(s) for s in (0, 4, 8, 20)] == [1.0, 2.0, 4.0, 32.0]
    assert [Cascade().slider_value(s) for s in (0, 10, 20)] == [-1.0, 0.0, 1.0]
    assert [Typical().slider_value(s) for s in (0, 8, 20)] == [100.0, 1.0, 0.001]
    for rule in RULES.values():
        field = rule.knob.setting.field
        for step in range(KNOB_STEPS + 1):
            assert step_from_knob(rule(**{field: rule().slider_value(step)})) == step
        assert rule(**{field: rule().slider_value(0)}).lossless == (rule.knob.lossless is not None)
    assert step_from_knob(Lenience(lenience=3.0)) in (6, 7)  # a flag's value between steps: the nearest


def test_builtin_themes_define_the_token_colours() -> None:
    themes = {theme.name: theme for theme in load_themes()}
    assert {"specplay-dark", "specplay-light", "specplay-colorblind"} <= set(themes)
    assert every(set(TOKEN_VARIABLES) <= set(theme.variables) for theme in themes.values())
    assert not themes["specplay-light"].dark
    assert len(builtin_theme_files()) == len(themes)


def test_a_theme_written_before_relaxed_tokens_had_their_name_still_loads(tmp_path: Path) -> None:
    shipped = (builtin_theme_files()[0]).read_text(encoding="utf-8")
    old = tmp_path / "old.toml"
    old.write_text(shipped.replace("spec-relaxed =", "spec-budget =").replace('name = "', 'name = "old-'), "utf-8")
    (theme,) = load_themes([old])
    assert theme.variables["spec-relaxed"] and "spec-budget" not in theme.variables


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((REPO / "themes").glob("*.toml")), ids=lambda p: p.name)
def test_every_theme_file_in_themes_loads_with_every_token_colour(path: Path) -> None:
    theme = theme_from_toml(path)
    for name in TOKEN_VARIABLES:
        assert Color.parse(theme.variables[name])  # a colour Textual can use, not just present
    assert Color.parse(theme.primary)


def test_themes_live_in_the_top_level_folder_and_ship_in_the_wheel() -> None:
    # A checkout (or editable install) reads the repo's themes/; the wheel copies them to
    # specplay/themes, which is where the loader looks first once installed.
    assert themes_dir() == REPO / "themes" and len(builtin_theme_files()) >= 3
    assert not (REPO / "specplay" / "ui" / "themes").exists()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    force_include = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force_include == {"themes": "specplay/themes"}


def test_a_theme_without_token_colours_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nprimary = "#000000"\n')
    with pytest.raises(ThemeError, match="spec-accepted"):
        theme_from_toml(path)


def test_tui_needs_a_drafter_before_loading_anything(capsys: pytest.CaptureFixture[str]) -> None:
    from specplay.config.demo import DEMO_DIR

    target, drafter = str(DEMO_DIR / "target"), f"near={DEMO_DIR / 'base'}"
    assert main(["tui", "--target", target]) == 2
    assert "--draft is needed" in capsys.readouterr().err
    assert main(["tui", "--target", target, "--draft", drafter, "--route", "far"]) == 2
    assert "--route" in capsys.readouterr().err


def test_the_playground_says_at_once_why_it_cannot_start(tmp_path: Path) -> None:
    """A model that is not there, or no terminal: one line and exit 2, before anything loads or draws."""
    import subprocess
    import sys
    import time

    for flags, said in [
        (["--target", str(tmp_path / "nope")], "is no folder here"),
        (["--target", "org/no-such-model"], "hf download org/no-such-model"),
        ([], "the playground needs a terminal"),
    ]:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "specplay", *flags, "--sessions-dir", str(tmp_path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SPECPLAY_CACHE_DIR": str(tmp_path / "cache")},
        )
        assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert time.monotonic() - started < 30


def test_the_tape_fills_in_drafted_texts_a_server_sends_later() -> None:
    from specplay.ui.widgets.tape import DraftTape

    tape = DraftTape()
    tape.add(_round(["accepted", "rejected"]), ("<1>", "<1>"))  # an opened session's, before the server answered
    tape.add(_round(["accepted"]), ("def",))  # decoded when its round came
    asked: list[int] = []
    tape.refresh_texts(lambda token_id: asked.append(token_id) or "fib")
    assert [line.plain.split("│ ")[1].split(" →")[0].strip() for line in tape._lines] == ["fib fib", "def"]
    assert asked == [1, 1]  # only the round holding unknown texts is decoded again


def test_native_stats_say_what_a_sampled_servers_acceptance_measures() -> None:
    from specplay.engine.events import ControlEvent, StartEvent
    from specplay.engine.settings import SamplingParams, SpecSettings
    from specplay.ui.widgets.stats_view import NATIVE_SAMPLED, server_account_stats

    tally = LaneTally()
    tally.add(StartEvent("speculative", None, None, (1,), 0, SpecSettings(sampling=SamplingParams(0.0))), 0.0)
    assert NATIVE_SAMPLED not in str(server_account_stats(tally, None))  # greedy: draft sampling does not matter
    tally.add(ControlEvent(3, (("temperature", 0.0, 0.7),)), 0.1)
    assert tally.temperature == 0.7 and NATIVE_SAMPLED in str(server_account_stats(tally, None))


def test_stats_and_plots_keep_their_height_and_ask_for_a_layout_only_to_grow() -> None:
    asked: list[bool] = []

    class Spy(Static):
        def update(self, content: VisualType = "", *, layout: bool = True) -> None:
            asked.append(layout)
            super().update(content, layout=layout)

    widget = Spy("")
    assert steady_update(widget, Content("a\nb\nc"), 3, 0) == 3
    assert steady_update(widget, Content("a"), 1, 3) == 3  # a run's start: blank lines hold the height
    assert str(widget.content) == "a\n\n" and str(widget.content).count("\n") + 1 == 3
    assert steady_update(widget, Content("a\nb\nc\nd"), 4, 3) == 4
    assert asked == [True, False, True]


def test_a_screenshots_leading_spaces_become_an_offset_for_rsvg() -> None:
    """rsvg-convert draws a run's leading spaces after its word; the PNG's runs start later instead."""
    from specplay.ui.screenshot import leading_spaces_as_offsets

    run = '<text class="r1" x="817.4" y="264" textLength="61" clip-path="url(#l)">&#160;read</text>'
    shifted = leading_spaces_as_offsets(f'<svg>{run}<text x="0" textLength="12.2">│</text></svg>')
    assert '<text class="r1" x="829.6" y="264" textLength="48.8" clip-path="url(#l)">read</text>' in shifted
    assert '<text x="0" textLength="12.2">│</text>' in shifted  # a run without leading spaces stays


def test_screenshots_saved_at_once_in_one_second_keep_each_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """f12 pressed over and over: every screenshot's worker saves at the same second, at once; each
    SVG keeps a name of its own and its own content (no PNGs here: the naming is what is tested)."""
    from datetime import datetime
    from threading import Barrier, Thread

    from specplay.ui import screenshot

    monkeypatch.setattr(screenshot, "to_png", lambda svg_path: None)
    now, count = datetime(2026, 12, 6, 3, 40, 0), 8
    start = Barrier(count)

    def save(i: int) -> None:
        start.wait()
        screenshot.save_screenshot(f"<svg>{i}</svg>", tmp_path, now)

    threads = [Thread(target=save, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    saved = sorted(path.read_text() for path in tmp_path.glob("specplay_2026-12-06T03-40-00*.svg"))
    assert saved == sorted(f"<svg>{i}</svg>" for i in range(count))


def test_the_tape_marks_a_rejection_with_its_corrections_rank() -> None:
    from specplay.ui.widgets.tape import round_line

    event = _round(["accepted", "rejected", "unreached"])
    ranked = [replace(p, correction_rank=r) for p, r in zip(event.positions, (None, 2, None), strict=True)]
    line = round_line(replace(event, positions=tuple(ranked)), ("a", "b", "c")).plain
    assert line.split("│ ")[1] == "a b² c → b"
    other = replace(event, positions=(event.positions[0], replace(event.positions[1], correction_rank=5)))
    assert "b⁵⁺ " in round_line(other, ("a", "b")).plain  # outside the drafter's top 4
    assert "²" not in round_line(event, ("a", "b", "c")).plain  # no rank known, nothing shown


def test_a_conversation_keeps_each_lanes_own_answers_and_knows_a_follow_up() -> None:
    def done(text: str) -> DoneEvent:
        return DoneEvent("length", (1,), text, {})

    class View:
        def clear_lanes(self) -> None:
            pass

    conversation = Conversation(LaneBoard(lambda: None), lambda: View())  # type: ignore[arg-type, return-value]
    lanes = ("speculative", "target")
    assert not conversation.follows_up("def f():")  # nothing to follow: a new conversation
    conversation.begin(lanes, None)
    assert conversation.turn_words() == ""  # a first turn alone says nothing of turns
    assert conversation.add("def f():", lanes, {"speculative": [done("a")], "target": [done("b")]})
    # The first prompt again, unchanged, runs again from the start; anything else follows up.
    assert not conversation.follows_up("def f():") and conversation.follows_up("shorter")
    assert conversation.turn_words() == " turn 2"
    assert conversation.add("shorter", lanes, {"speculative": [done("c")], "target": [done("d")]})
    assert conversation.follows_up("shorter") and conversation.follows_up("def f():")  # after turn 2, all follow up
    assert conversation.earlier() == {
        "speculative": (Exchange("def f():", "a"), Exchange("shorter", "c")),
        "target": (Exchange("def f():", "b"), Exchange("shorter", "d")),
    }
    # A lane with no end to answer with (its run failed): the turn is not kept.
    assert not conversation.add("more", lanes, {"speculative": [done("e")], "target": []})
    assert len(conversation) == 2
    # A saved conversation's re-run counts its turns; forgetting leaves nothing to follow.
    conversation.begin(lanes, None, queued=["shorter"])
    assert conversation.turn_words() == " turn 1 of 2" and not conversation.follows_up("shorter")
    assert conversation.refusal(lambda: "the route is none, which drafts nothing") is None  # no draft-only lane
    conversation.forget()
    assert len(conversation) == 0 and conversation.lanes == () and conversation.queued == []


def test_a_conversations_tokens_per_s_weighs_each_turn_by_its_tokens() -> None:
    """Every turn's tokens after its first delivery over the time they took: turns at 5 and 1
    tokens/s, 5 tokens each after their first, read 10 tokens over 6 s (not the mean, 3 tokens/s);
    acceptance over every turn's rounds."""
    first, second = LaneTally(), LaneTally()
    first.add(_round(["accepted", "rejected", "unreached", "unreached"]), busy_s=1.0)
    first.add(_round(["accepted", "accepted", "accepted", "accepted"]), busy_s=2.0)
    second.add(_round(["rejected", "unreached"]), busy_s=1.0)
    for busy_s in (2.0, 3.0, 4.0, 5.0, 6.0):
        second.add(_round(["rejected"]), busy_s=busy_s)
    assert first.tokens_per_s == pytest.approx(5.0) and second.tokens_per_s == pytest.approx(1.0)
    figures = conversation_figures([first, second])
    assert figures.turns == 2 and figures.tokens == 7 + 6
    assert figures.tokens_per_s == pytest.approx((5 + 5) / (1.0 + 5.0))
    assert figures.draft_acceptance_rate == pytest.approx(5 / (8 + 2 + 5))
    assert figures.mean_acceptance_length == pytest.approx(1 + 5 / 8)


def test_tui_takes_its_first_prompt_from_a_file_as_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specplay.cli import build_parser
    from specplay.cli.tui import configure

    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def parse(path):\n    with open(path) as f:\n", encoding="utf-8")
    args = build_parser().parse_args(
        ["tui", "--target", "demo", "--prompt-file", str(prompt), "--sessions-dir", str(tmp_path)]
    )
    config, _ = configure(args)
    assert config.request.prompt == prompt.read_text(encoding="utf-8")
    with pytest.raises(SystemExit) as both:  # argparse's one line, as run says it
        main(["tui", "--target", "demo", "--prompt", "x", "--prompt-file", str(prompt)])
    assert both.value.code == 2 and "not allowed with argument --prompt" in capsys.readouterr().err
    assert main(["tui", "--target", "demo", "--prompt-file", str(tmp_path / "missing.txt")]) == 2
    assert "--prompt-file" in capsys.readouterr().err
