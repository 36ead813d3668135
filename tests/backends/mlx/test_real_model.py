"""SmolLM2-135M-Instruct, a real chat model, through the whole of specplay: its GGUF file loaded by
name, the chat template, lossless greedy speculation with drafters made from the target and from
no model (also under live changes), consistent caches, and sessions that replay."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.cli import main
from specplay.engine.events import ControlEvent, Event, RoundEvent
from specplay.engine.layout import is_chain
from specplay.store import load_session
from specplay.ui.protocols import RunState
from tests.support.checks import every
from tests.support.drafters import early_exit, lookup
from tests.support.engine_runs import done, rounds, run
from tests.support.observed import Observed

# Asks to rewrite a given function: the answer copies much of the prompt, where prompt lookup shines.
EDIT_PROMPT = (
    "Rewrite this function so it uses a list comprehension. Keep the name and the docstring.\n\n"
    "def squares(numbers):\n"
    '    """The squares of the even numbers."""\n'
    "    result = []\n"
    "    for n in numbers:\n"
    "        if n % 2 == 0:\n"
    "            result.append(n * n)\n"
    "    return result\n"
)
STORY_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
TOKENS = 24


@pytest.fixture(scope="module")
def smol(smollm2: Path) -> MlxBackend:
    """SmolLM2 with prompt lookup and early exits after 8 and 26 of its 30 layers."""
    drafters = [
        ("lookup", lookup(2, 4)),
        ("exit8", early_exit(8, name="exit8")),
        ("exit26", early_exit(26, name="exit26")),
    ]
    return load_mlx_backend(str(smollm2), drafters)


def test_the_gguf_loads_by_catalog_name_with_its_chat_template(smol: MlxBackend) -> None:
    assert smol.target.location.endswith(".gguf")
    ids = smol.encode("Hi!", raw=False)
    text = smol.tokenizer.decode(ids)
    assert "<|im_start|>user\nHi!<|im_end|>" in text and text.rstrip().endswith("<|im_start|>assistant")
    assert smol.describe()["models"]["target"]["kind"] == "gguf"
    assert smol.context_length == 8192


@pytest.mark.parametrize("route", ["lookup", "exit8", "exit26"])
def test_greedy_speculation_equals_greedy_target_only_with_every_drafter_kind(smol: MlxBackend, route: str) -> None:
    observed = Observed(smol)
    expected = done(run(smol, EDIT_PROMPT, mode="target", max_tokens=TOKENS, raw=False)).token_ids
    events = run(observed, EDIT_PROMPT, max_tokens=TOKENS, route=route, k=4, raw=False)
    assert done(events).token_ids == expected
    generation = observed.generations[-1]
    committed = len(generation.tokens) - 1
    assert every(length <= committed for length in generation.cache_lengths().values())
    assert rounds(events)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_greedy_trees_equal_greedy_target_only(smol: MlxBackend, width: int) -> None:
    """Early exits grow trees on the real model's own layers (their tree passes share the
    target's modules); widths 1-4, node budgets up to 16; the target's cache holds the committed
    tokens after every round."""
    observed = Observed(smol)
    for prompt in (EDIT_PROMPT, STORY_PROMPT):
        expected = done(run(smol, prompt, mode="target", max_tokens=TOKENS, raw=False)).token_ids
        for route, k, nodes in (("exit26", 4, 0), ("exit8", 6, 16), ("lookup", 4, 8)):
            events = run(
                observed, prompt, max_tokens=TOKENS, route=route, k=k, width=width, tree_nodes=nodes, raw=False
            )
            assert done(events).token_ids == expected, (prompt[:10], route, width, nodes)
            drafted = [r for r in rounds(events) if r.nodes]
            assert drafted and (width > 1 or every(is_chain(r.parents) for r in drafted))  # width 1: chains
            generation = observed.generations[-1]
            assert generation.cache_lengths()["target"] == len(generation.tokens) - 1


def test_live_k_and_route_changes_stay_lossless(smol: MlxBackend) -> None:
    expected = done(run(smol, STORY_PROMPT, mode="target", max_tokens=TOKENS, raw=False)).token_ids
    chooser = random.Random(7)

    def change(event: Event, controls: object) -> None:
        if isinstance(event, RoundEvent):
            controls.update(k=chooser.randint(1, 6), route=chooser.choice(["lookup", "exit8", "exit26"]))  # type: ignore[attr-defined]

    events = run(smol, STORY_PROMPT, max_tokens=TOKENS, route="exit26", on_event=change, raw=False)
    assert done(events).token_ids == expected
    assert sum(isinstance(e, ControlEvent) for e in events) >= 2
    assert {r.drafter for r in rounds(events)} >= {"lookup", "exit8"}


def test_the_cli_runs_and_replays_the_real_model_by_name(
    smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(smollm2.parents[1]))  # where the test run fetched it
    args = ["run", "--target", "smollm2", "--draft", "lookup=prompt-lookup", "--draft", "exit=early-exit:layers=26"]
    args += ["--prompt", EDIT_PROMPT, "--max-tokens", "16", "--json", "--save", "--sessions-dir", str(tmp_path)]
    assert main(args) == 0, capsys.readouterr().err
    first = json.loads(capsys.readouterr().out)
    assert first["route"] == "lookup" and first["metrics"]["num_tokens"] == 16  # the router sends code to lookup
    session = load_session(Path(first["session"]))
    models = session.header["backend"]["models"]
    assert models["target"]["kind"] == "gguf" and models["lookup"]["kind"] == "prompt-lookup"
    assert models["exit"] == models["exit"] | {"kind": "early-exit", "layers": 26}
    assert main(["run", "--replay", session.id, "--sessions-dir", str(tmp_path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["token_ids"] == first["token_ids"] and again["sources"] == first["sources"]


def test_every_turn_of_a_greedy_conversation_equals_target_only(
    smollm2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` with three --prompt on the real chat model: each lane continues its own conversation
    through the chat template, and every turn of the speculative lane is target-only's text."""
    prompts = [EDIT_PROMPT, "Now rename the function to even_squares.", "Add type hints to it."]
    args = ["run", "--target", str(smollm2), "--draft", "lookup=prompt-lookup", "--draft", "exit=early-exit:layers=26"]
    args += [flag for prompt in prompts for flag in ("--prompt", prompt)]
    args += ["--max-tokens", "40", "--json", "--save", "--sessions-dir", str(tmp_path)]
    assert main(args) == 0, capsys.readouterr().err
    turns = json.loads(capsys.readouterr().out)["turns"]
    assert [t["prompt"] for t in turns] == prompts
    before: list[int] = []
    for turn in turns:
        assert turn["token_ids"] and turn["token_ids"] == turn["baseline"]["token_ids"], turn["prompt"]
        ids = turn["prompt_token_ids"]
        assert ids[: len(before)] == before and len(ids) > len(before)
        before = ids
    session = load_session(next(tmp_path.glob("*.jsonl")))
    assert session.complete and [len(t.lanes) for t in session.turns] == [2, 2, 2]
    assert all(t.main.text == t.lanes["target"].text for t in session.turns)


@pytest.mark.parametrize(
    "draft, message",
    [
        ("exit=early-exit:layers=30", "layers=30 is out of range; the target has 30 layers, so use 1..29"),
        ("lookup=prompt-lookup:n=0-2", "needs n=MIN-MAX with 1 <= MIN <= MAX <= 16"),
    ],
)
def test_bad_drafters_of_the_real_model_are_one_line(
    draft: str, message: str, smollm2: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--target", str(smollm2), "--draft", draft, "--prompt", "x", "--max-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


async def test_with_no_model_flags_the_playground_writes_english_on_smollm2(
    smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README command 1's last step, `specplay` once SmolLM2 is fetched: the status line names the
    model and its drafters, ctrl+r fills both lanes with English and says where auto routed."""
    from specplay.cli import build_parser
    from specplay.cli.tui import configure
    from specplay.engine.events import StepEvent
    from specplay.ui.app import create_app
    from tests.support.ui_helpers import wait_for

    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(smollm2.parents[1]))  # where the test run fetched it
    args = build_parser().parse_args(["tui", "--max-tokens", "32", "--sessions-dir", str(tmp_path)])
    args.argv = []
    config, _ = configure(args)  # as `specplay` builds it: the library's first prompt in the editor
    app = create_app(config)
    playground = app.playground
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: playground.state == RunState.READY, "the models to load", timeout_s=120)
        ready = "SmolLM2-135M-Instruct, drafters lookup (prompt lookup, n 2..4; for code), exit (early exit after"
        assert ready in playground.status
        await pilot.press("ctrl+r")
        routed = "auto: code prompt → lookup (the route map)"  # the set's map names lookup for code
        await wait_for(pilot, lambda: routed in playground.status, "the run to start")
        await wait_for(pilot, lambda: playground.last_session is not None, "both lanes and the session", 240)
    for lane in ("speculative", "target"):
        tokens = [t for e in playground.events[lane] if isinstance(e, RoundEvent) for t in e.tokens]
        tokens += [e.token for e in playground.events[lane] if isinstance(e, StepEvent)]
        words = "".join(t.text for t in tokens).split()
        english = {"the", "a", "to", "of", "and", "is", "it", "this", "in", "def", "return", "with", "for"}
        assert len(words) >= 8 and english & {w.lower().strip(".,:`") for w in words}, (lane, words)


FOLLOW_UP = "Say that again in one short sentence."


async def test_a_playground_conversation_on_smollm2_answers_every_turn_as_target_only(
    smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The playground on the real chat model, greedy and lossless (its defaults): a follow-up typed
    after the first answer is each lane's second turn on its kept caches, and in both turns the
    speculative lane's tokens are target-only's; the session holds both turns."""
    from textual.widgets import TextArea

    from specplay.cli import build_parser
    from specplay.cli.tui import configure
    from specplay.engine.events import DoneEvent
    from specplay.ui.app import create_app
    from tests.support.ui_helpers import wait_for

    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(smollm2.parents[1]))
    flags = ["--max-tokens", "24", "--sessions-dir", str(tmp_path), "--route", "lookup"]
    args = build_parser().parse_args(["tui", *flags])
    args.argv = []
    config, _ = configure(args)
    app = create_app(config)
    playground = app.playground

    def answers() -> dict[str, list[int]]:
        ends = {lane: playground.events[lane][-1] for lane in ("speculative", "target")}
        assert all(isinstance(end, DoneEvent) for end in ends.values()), ends
        return {lane: list(end.token_ids) for lane, end in ends.items()}  # type: ignore[union-attr]

    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: playground.state == RunState.READY, "the models to load", timeout_s=120)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: playground.last_session is not None, "turn 1 in both lanes", 240)
        first = answers()
        assert first["speculative"] and first["speculative"] == first["target"]
        prompt = app.query_one("#prompt", TextArea)
        prompt.focus()
        await pilot.press(*FOLLOW_UP)  # the run left the prompt selected: typing replaces it
        await pilot.press("ctrl+r")

        def turn_2_ended() -> bool:
            return playground.state == RunState.READY and "turn 2" in playground.status

        await wait_for(pilot, turn_2_ended, "turn 2 in both lanes", 240)
        second = answers()
        assert second["speculative"] and second["speculative"] == second["target"]
    session = load_session(playground.last_session)  # type: ignore[arg-type]
    assert session.complete and [turn.prompt for turn in session.turns][1:] == [FOLLOW_UP]
    assert all(turn.main.text == turn.lanes["target"].text for turn in session.turns)
