"""`specplay run` with `--prompt` given several times: a conversation, each turn answered in every
lane after that lane's own earlier answers, saved turn by turn, reported turn by turn, replayed
whole, and read whole by the commands that sum a session's rounds."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from specplay.backends import open_stream
from specplay.backends.mlx.loading import encode_prompt, load_model
from specplay.cli import build_parser, main
from specplay.cli.configure import given, run_config
from specplay.config.demo import DEMO_DIR
from specplay.engine.conversation import Exchange
from specplay.engine.events import Event, RoundEvent
from specplay.engine.request import Request
from specplay.router_training.examples import read_examples
from specplay.runner.session_run import run_sample
from specplay.store import Session, load_session
from tests.support.prompts import CONVERSATION
from tests.support.tiny_models import TinyModels

TURNS = [flag for prompt in CONVERSATION for flag in ("--prompt", prompt)]


def printed(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    capsys.readouterr()
    assert main(["run", *args, "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    return json.loads(line)


def assert_each_lane_continues_its_own_conversation(session: Session, target: Path, raw: bool = False) -> None:
    """Each later turn's prompt is the lane's earlier turn's prompt extended: its earlier exchanges
    (its own answers), then the new prompt, encoded as a run encodes them."""
    tokenizer = load_model("target", str(target)).tokenizer
    for lane in session.header["lanes"]:
        earlier: list[Exchange] = []
        before: list[int] = []
        for turn in session.turns:
            start = turn.lanes[lane].start
            assert start is not None
            ids = list(start.prompt_token_ids)
            assert ids == encode_prompt(tokenizer, turn.prompt, raw, earlier), (lane, turn.index)
            assert ids[: len(before)] == before and len(ids) > len(before)
            earlier.append(Exchange(turn.prompt, turn.lanes[lane].text))
            before = ids


@pytest.mark.parametrize("models", ["demo", "chat-template"])
def test_every_greedy_turn_equals_target_only_and_is_saved_and_reported(
    models: str, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if models == "demo":
        target, flags = DEMO_DIR / "target", ["--target", "demo"]
    else:  # the same weights as a drafter: a conversation through the ChatML template
        target, flags = tiny.chat_target, ["--target", str(tiny.chat_target), "--draft", f"same={tiny.chat_target}"]
    out = printed(capsys, *flags, *TURNS, "--max-tokens", "24", "--save", "--sessions-dir", str(tmp_path))
    assert set(out) == {"turns", "session", "models"} and [t["prompt"] for t in out["turns"]] == list(CONVERSATION)
    session = load_session(Path(out["session"]))
    assert session.complete and [t.prompt for t in session.turns] == list(CONVERSATION)
    for reported, turn in zip(out["turns"], session.turns, strict=True):
        assert reported["mode"] == "speculative" and reported["token_ids"], turn.index
        assert reported["token_ids"] == reported["baseline"]["token_ids"], turn.index  # lossless, every turn
        assert list(turn.lanes) == ["speculative", "target"]
        assert turn.main.token_ids == reported["token_ids"] == turn.lanes["target"].token_ids
        assert turn.main.text == reported["text"] == turn.lanes["target"].text
        assert list(turn.main.start.prompt_token_ids) == reported["prompt_token_ids"]  # type: ignore[union-attr]
    assert_each_lane_continues_its_own_conversation(session, target)


def test_one_prompt_is_reported_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    """One --prompt: today's object, the first turn of the same conversation."""
    alone = printed(capsys, "--target", "demo", "--prompt", CONVERSATION[0], "--max-tokens", "16", "--compare")
    conversation = printed(capsys, "--target", "demo", *TURNS, "--max-tokens", "16", "--compare")
    assert "turns" not in alone and {"token_ids", "text", "rounds", "metrics", "baseline"} <= set(alone)
    first = conversation["turns"][0]
    assert first.pop("prompt") == CONVERSATION[0]
    assert first["token_ids"] == alone["token_ids"] and first["prompt_token_ids"] == alone["prompt_token_ids"]
    assert set(first) == set(alone) - {"models"}  # the models run: once, beside the turns
    assert conversation["models"] == alone["models"]


def test_the_transcript_shows_where_each_turn_starts(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["run", "--target", "demo", *TURNS, "--max-tokens", "8", "--compare"]) == 0
    out = capsys.readouterr().out
    headings = [f"turn {i + 1} of 3: {prompt}" for i, prompt in enumerate(CONVERSATION)]
    at = [out.index(heading) for heading in headings]
    assert at == sorted(at)
    # Each turn's stats line, with its speedup, before the next turn's heading.
    stats = [i for i, line in enumerate(out.splitlines()) if line.startswith("speculative · ")]
    lines = out.splitlines()
    assert len(stats) == 3 and all("speedup" in lines[i] for i in stats)
    assert [next(i for i, line in enumerate(lines) if heading in line) for heading in headings] < stats


def test_a_replay_runs_the_whole_conversation_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sampled = ["--temperature", "1", "--seed", "3", "--max-tokens", "16"]
    first = printed(capsys, "--target", "demo", *TURNS, *sampled, "--save", "--sessions-dir", str(tmp_path))
    again = printed(capsys, "--replay", Path(first["session"]).stem, "--sessions-dir", str(tmp_path))
    assert [t["prompt"] for t in again["turns"]] == list(CONVERSATION)
    for a, b in zip(first["turns"], again["turns"], strict=True):
        assert a["token_ids"] == b["token_ids"] and a["prompt_token_ids"] == b["prompt_token_ids"]
        assert a["settings"] == b["settings"] and a["seed"] == b["seed"] == 3
    # A --prompt given with --replay replaces the conversation.
    replaced = printed(capsys, "--replay", first["session"], "--prompt", "x = 1")
    assert "turns" not in replaced and replaced["settings"] == first["turns"][0]["settings"]


# A Ctrl-C that lands inside a garbage collector callback is swallowed there (and reported as
# unraisable): the next round sends another, so the run is still interrupted.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_in_a_later_turn_keeps_the_conversation_so_far(tmp_path: Path) -> None:
    flags = ["run", "--target", "demo", *TURNS, "--max-tokens", "24", "--ignore-eos", "--sessions-dir", str(tmp_path)]
    config = run_config(given(build_parser().parse_args(flags)))
    stream = open_stream(config)
    turn, interrupted = [0], []

    def on_event(lane: str, event: Event) -> None:
        if turn[0] == 1 and isinstance(event, RoundEvent) and not interrupted:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the terminal sends it, mid-turn

    def on_turn(index: int, prompt: str) -> None:
        turn[0] = index

    request_config = config.request
    assert request_config.prompt is not None
    request = Request(
        request_config.prompt,
        tuple(stream.encode(request_config.prompt, raw=request_config.raw)),
        max_tokens=24,
        ignore_eos=True,
    )
    try:
        result = run_sample(
            stream,
            config,
            request,
            on_event,
            save=True,
            baseline=True,
            on_interrupt=lambda: interrupted.append(True),
            follow_ups=request_config.follow_ups,
            on_turn=on_turn,
        )
    finally:
        stream.close()
    assert interrupted == [True] and result.cancelled and len(result.turns) == 2
    assert result.turns[1].baseline is None  # no lane and no turn after the one stopped
    assert result.session is not None
    session = load_session(result.session)
    assert not session.complete and [t.prompt for t in session.turns] == list(CONVERSATION[:2])
    assert all(lane.complete for lane in session.turns[0].lanes.values())
    stopped = session.turns[1].main
    assert stopped.done is not None and stopped.done.finish_reason == "cancelled" and stopped.token_ids
    assert stopped.token_ids == result.turns[1].main.token_ids
    assert session.turns[1].lanes["target"].start is None


def test_costs_reads_every_turns_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--target", "demo", *TURNS, "--route", "base", "--max-tokens", "32", "--no-baseline"]
    assert main(["run", *flags, "--save", "--sessions-dir", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.jsonl")
    session = load_session(path)

    def acceptance(rounds: list[RoundEvent]) -> list[float]:
        depth = max(r.depth for r in rounds)
        return [
            sum(r.num_accepted > i for r in rounds if r.depth > i) / sum(r.depth > i for r in rounds)
            for i in range(depth)
        ]

    every_turn = acceptance([r for lane in session.main_lanes for r in lane.rounds])
    assert every_turn != pytest.approx(acceptance(session.main.rounds))  # the first turn alone reads otherwise
    capsys.readouterr()
    quick = ["--target", "demo", "--prompt", "def f(x):", "--repeats", "1", "--max-rows", "9", "--json"]
    assert main(["costs", *quick, "--sessions", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["drafters"]["base"]["acceptance_per_position"] == pytest.approx(every_turn)


def test_a_router_learns_from_every_turn(tmp_path: Path) -> None:
    flags = ["--target", "demo", *TURNS, "--counterfactual", "--max-tokens", "16", "--no-baseline"]
    assert main(["run", *flags, "--save", "--sessions-dir", str(tmp_path)]) == 0
    found = read_examples([str(tmp_path)])
    assert [(one.prompt, one.turn) for one in found.examples] == [(p, i) for i, p in enumerate(CONVERSATION)]
    session = load_session(next(tmp_path.glob("*.jsonl")))
    for one, turn in zip(found.examples, session.turns, strict=True):  # each scored by its own turn's rounds
        judged = [r for r in turn.main.rounds if r.counterfactuals]
        for name, score in one.scores.drafters.items():
            assert score.rounds == sum(name in (r.drafter, *(c.drafter for c in r.counterfactuals)) for r in judged)
