"""The playground continues a conversation, driven by Textual's Pilot on the scripted backend: a
follow-up typed in the prompt box is each lane's next turn after its own earlier answer, a live
change in that turn applies there, ctrl+n starts over, the session holds every turn and opens
again showing them all."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import TextArea
from textual_slider import Slider

from specplay.cli import build_parser
from specplay.cli import tui as tui_command
from specplay.display.text import visible
from specplay.engine.conversation import Exchange
from specplay.engine.events import ControlEvent, DoneEvent, Event, RoundEvent, StartEvent
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import SpecSettings
from specplay.store import list_session_files, load_session
from specplay.ui.app import PlaygroundApp, create_app
from specplay.ui.protocols import RunState
from specplay.ui.widgets.lane_view import LaneView
from specplay.ui.widgets.tape import DraftTape
from tests.support.checks import every
from tests.support.fake_vllm import FakeVllm
from tests.support.prompts import CODE_PROMPT, CONVERSATION
from tests.support.scripted import ScriptedBackend, scripted_backend
from tests.support.tiny_models import TinyModels
from tests.support.ui_helpers import RoundHold, app_for, make_app, scripted_app, server_config, wait_for

FOLLOW_UP = "Now the same, with a docstring."
TOKENS = 64
LANES = ("speculative", "target")
K_MARKER = " ⟨k=2⟩ "
"""Where the k change took effect in the speculative lane's text."""


def _separator(turn: int, prompt: str) -> str:
    """Where a turn begins in a lane's text: the user's prompt, on lines of its own."""
    return f"\n\n you, turn {turn}  {prompt}\n\n"


def _app(backend: ScriptedBackend, tmp_path: Path, **kwargs: object) -> PlaygroundApp:
    """Turns that end on their own, greedy and lossless, the route pinned to near."""
    options = {"prompt": CODE_PROMPT, "max_tokens": TOKENS, "ignore_eos": True, "raw": True} | kwargs
    return scripted_app(backend, tmp_path, **({"settings": SpecSettings(route="near")} | options))


def _done(app: PlaygroundApp, lane: str) -> DoneEvent:
    final = app.playground.events[lane][-1]
    assert isinstance(final, DoneEvent), final
    return final


def _start(events: list[Event]) -> StartEvent:
    assert isinstance(events[0], StartEvent)
    return events[0]


def _rounds(events: list[Event]) -> list[RoundEvent]:
    return [e for e in events if isinstance(e, RoundEvent)]


def _text(app: PlaygroundApp, lane: str) -> str:
    return app.query_one(f"#{lane}", LaneView).text


async def _type(app: PlaygroundApp, pilot: Pilot[None], text: str) -> None:
    """Type `text` in the prompt box after a run, as a user does: the run left the prompt
    selected, so what is typed replaces it."""
    prompt = app.query_one("#prompt", TextArea)
    prompt.focus()
    assert prompt.selected_text == prompt.text
    await pilot.press(*text)
    assert prompt.text == text


async def _run_to_the_end(app: PlaygroundApp, pilot: Pilot[None], saved: int) -> None:
    """ctrl+r on a playground that is not showing a finished run, and wait until the run ended and
    its session was saved (`saved` sessions so far)."""
    playground = app.playground
    assert not playground.status.startswith("finished")
    await pilot.press("ctrl+r")

    def ended() -> bool:
        return playground.state == RunState.READY and playground.status.startswith("finished")

    await wait_for(pilot, ended, "the run to end", timeout_s=60)
    assert len(list_session_files(playground.config.sessions_dir)) == saved


async def test_a_follow_up_continues_each_lanes_conversation_and_a_live_change_applies_in_its_turn(
    tmp_path: Path,
) -> None:
    backend = scripted_backend(drafters=("near", "far"))
    app = _app(backend, tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        await _run_to_the_end(app, pilot, saved=1)
        first = {lane: _done(app, lane).text for lane in LANES}
        assert first["speculative"] == first["target"]  # greedy and lossless: the same answer
        assert "a new prompt follows up" in app.playground.status
        session_path = app.playground.last_session
        assert session_path is not None and load_session(session_path).complete  # complete between turns

        # Turn 2: a follow-up typed in the box; k moved while it runs.
        await _type(app, pilot, FOLLOW_UP)
        generations = list(backend.generations)
        forwards = len(backend.forwards)
        hold = RoundHold(app.playground.board)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "generating turn 2" in app.playground.status, "turn 2 to start")
        await wait_for(pilot, hold.reached.is_set, "turn 2's first round")
        app.query_one("#k", Slider).value = 2
        await wait_for(pilot, lambda: app.playground.settings.k == 2, "the k slider to move")
        hold.release()
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "turn 2 to end", timeout_s=60)
        assert app.playground.status.startswith("finished (length) turn 2 · ")

        speculative, target = (app.playground.events[lane] for lane in LANES)
        # Each lane answered the follow-up after its own first answer, from the caches it kept.
        for lane, events in (("speculative", speculative), ("target", target)):
            expected = backend.encode(FOLLOW_UP, True, [Exchange(CODE_PROMPT, first[lane])])
            assert list(_start(events).prompt_token_ids) == expected, lane
        assert {id(g) for g in backend.generations[len(generations) :]} == {id(g) for g in generations}
        prefilled = max(rows for model, rows in backend.forwards[forwards:] if model == "target")
        # Only the follow-up's tokens (and the last answer's last) were prefilled, not the conversation.
        assert prefilled <= len(FOLLOW_UP) + 1 < len(_start(target).prompt_token_ids) / 2
        second = {lane: _done(app, lane).text for lane in LANES}
        assert second["speculative"] == second["target"] and len(_done(app, "target").token_ids) == TOKENS
        # The k change landed in turn 2, in the speculative lane only, and its rounds after it draft 2.
        changes = [i for i, e in enumerate(speculative) if isinstance(e, ControlEvent)]
        assert len(changes) == 1 and ("k", 4, 2) in speculative[changes[0]].changes  # type: ignore[union-attr]
        assert every(r.nodes == 4 for r in _rounds(speculative[: changes[0]]))
        assert every(r.nodes <= 2 for r in _rounds(speculative[changes[0] :])) and _rounds(speculative[changes[0] :])
        assert not any(isinstance(e, ControlEvent) for e in target)

        # Both lanes show where turn 2 begins, with the user's prompt, then its answer.
        assert K_MARKER in _text(app, "speculative")
        for lane in LANES:
            assert _text(app, lane).replace(K_MARKER, "") == f"{first[lane]}{_separator(2, FOLLOW_UP)}{second[lane]}"
        assert "── turn 2 ──" in str(app.query_one(DraftTape).query_one("Static").render())
        stats = str(app.query_one("#speculative", LaneView).query_one(".lane-stats").render())
        assert stats.startswith("turn 2: ") and "all 2 turns: " in stats and "speedup" in stats.split("all 2")[1]
        turns = app.playground.turn_tallies("speculative")
        assert [t.tokens for t in turns] == [TOKENS, TOKENS] and f"{2 * TOKENS} tokens" in stats.split("all 2 turns")[1]

        # The session holds the conversation: both turns, each lane's answers, the change in turn 2.
        session = load_session(session_path)
        assert app.playground.last_session == session_path and session.complete
        assert [t.prompt for t in session.turns] == [CODE_PROMPT, FOLLOW_UP]
        for turn, texts in zip(session.turns, (first, second), strict=True):
            assert {lane: turn.lanes[lane].done.text for lane in LANES} == texts  # type: ignore[union-attr]
        assert any(isinstance(e, ControlEvent) for e in session.turns[1].lanes["speculative"].events)
        assert not any(isinstance(e, ControlEvent) for e in session.turns[0].lanes["speculative"].events)

        # ctrl+n starts over: the lanes clear, and the next run's prompt holds no earlier turn.
        await pilot.press("ctrl+n")
        assert not _text(app, "speculative") and app.playground.status.startswith("new conversation")
        await _run_to_the_end(app, pilot, saved=2)
        for lane in LANES:
            assert list(_start(app.playground.events[lane]).prompt_token_ids) == backend.encode(FOLLOW_UP, True)
        assert app.playground.last_session != session_path
        assert len(load_session(app.playground.last_session).turns) == 1
        assert "you, turn" not in _text(app, "speculative")

    # `tui --open` of the conversation shows every turn, read-only; ctrl+r runs it again, turn by turn.
    opened = _app(backend, tmp_path, open_session=session_path)
    async with opened.run_test(size=(160, 50)) as pilot:
        for lane in LANES:
            assert _text(opened, lane).replace(K_MARKER, "") == _text_of(session_path, lane)
        assert opened.playground.turn_tallies("speculative")[0].tokens == TOKENS
        await wait_for(pilot, lambda: opened.playground.state == RunState.READY, "models to load")
        assert "a conversation of 2 turns, read-only" in opened.playground.status
        stats = str(opened.query_one("#speculative", LaneView).query_one(".lane-stats").render())
        assert stats.startswith("turn 2: ") and "all 2 turns: " in stats
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "finished (length) turn 2" in opened.playground.status, "both turns", 60)
        rerun = load_session(opened.playground.last_session)  # type: ignore[arg-type]
        assert rerun.path != session_path and [t.prompt for t in rerun.turns] == [CODE_PROMPT, FOLLOW_UP]
        assert rerun.turns[1].lanes["speculative"].done.text == second["speculative"]  # type: ignore[union-attr]


def _text_of(path: Path, lane: str) -> str:
    """What a lane shows of a saved conversation: each turn's answer, a later turn's after its
    prompt (control characters as their pictures)."""
    session = load_session(path)
    parts = []
    for turn in session.turns:
        if turn.index:
            parts.append(_separator(turn.index + 1, turn.prompt))
        parts.append(turn.lanes[lane].done.text)  # type: ignore[union-attr]
    return visible("".join(parts))


async def test_a_follow_up_on_real_mlx_caches_answers_alike_in_both_lanes(tiny: TinyModels, tmp_path: Path) -> None:
    """The tiny MLX models through their chat template, greedy and lossless: turn 2, typed as a
    follow-up, is each lane's conversation encoded after its own first answer, the lanes give the
    same answer, and each lane's generation (its caches) is the one its first turn left."""
    prompt, follow_up = CONVERSATION[0], CONVERSATION[1]
    settings = SpecSettings(route="near")
    app = make_app(tiny, tmp_path, target=tiny.chat_target, prompt=prompt, max_tokens=12, settings=settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load", timeout_s=120)
        await _run_to_the_end(app, pilot, saved=1)
        stream = app.playground.host.stream
        assert isinstance(stream, SpecEngine)
        first = {lane: _done(app, lane).text for lane in LANES}
        kept = {lane: stream.kept[lane] for lane in LANES}  # type: ignore[index]
        await _type(app, pilot, follow_up)
        await pilot.press("ctrl+r")

        def turn_2_ended() -> bool:
            return app.playground.state == RunState.READY and "turn 2" in app.playground.status

        await wait_for(pilot, turn_2_ended, "turn 2 to end", timeout_s=120)
        for lane in LANES:
            ids = list(_start(app.playground.events[lane]).prompt_token_ids)
            assert ids == stream.encode(follow_up, False, [Exchange(prompt, first[lane])]), lane
            assert stream.kept[lane] is kept[lane]  # type: ignore[index]
        speculative, target = (_done(app, lane) for lane in LANES)
        assert speculative.token_ids == target.token_ids and speculative.token_ids
        session = load_session(app.playground.last_session)  # type: ignore[arg-type]
        assert [turn.prompt for turn in session.turns] == [prompt, follow_up] and session.complete

    # `specplay tui --open SESSION`, as the command builds it: every turn, read-only, on its models.
    args = build_parser().parse_args(["tui", "--open", session.id, "--sessions-dir", str(tmp_path)])
    config, opened = tui_command.configure(args)
    reopened = create_app(config, tui_command.playground_options(args, config, opened))
    async with reopened.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: reopened.playground.state == RunState.READY, "models to load", timeout_s=120)
        assert "a conversation of 2 turns, read-only" in reopened.playground.status
        for lane in LANES:
            assert _text(reopened, lane) == _text_of(session.path, lane)


async def test_a_follow_up_on_vllm_servers_sends_each_lane_its_own_conversation(
    servers: tuple[FakeVllm, FakeVllm], tmp_path: Path
) -> None:
    """Lanes on (fake) vLLM servers: the follow-up's prompt is each lane's conversation, encoded
    by the server's tokenizer after the lane's own first answer (the server keeps its own prefix
    cache), and greedy lanes answer it alike."""
    target, near = servers
    config = server_config(
        target.url, {"near": near.url}, tmp_path, settings=SpecSettings(route="near"), prompt=CODE_PROMPT, raw=True
    )
    app = app_for(replace(config, request=replace(config.request, max_tokens=12, ignore_eos=True)))
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the servers", timeout_s=60)
        await _run_to_the_end(app, pilot, saved=1)
        first = {lane: _done(app, lane).text for lane in LANES}
        await _type(app, pilot, FOLLOW_UP)
        await pilot.press("ctrl+r")

        def turn_2_ended() -> bool:
            return app.playground.state == RunState.READY and "turn 2" in app.playground.status

        await wait_for(pilot, turn_2_ended, "turn 2 to end", timeout_s=60)
        stream = app.playground.host.stream
        assert stream is not None
        for lane in LANES:
            ids = list(_start(app.playground.events[lane]).prompt_token_ids)
            assert ids == stream.encode(FOLLOW_UP, True, [Exchange(CODE_PROMPT, first[lane])]), lane
        assert _done(app, "speculative").token_ids == _done(app, "target").token_ids
        assert [t.prompt for t in load_session(app.playground.last_session).turns] == [CODE_PROMPT, FOLLOW_UP]  # type: ignore[arg-type]
