"""The headless runner's conversations (on the scripted backend, whose caches and clock follow the
MLX backend's rules): each lane answers each turn after its own earlier answers, and goes on
with its own caches, so a later turn prefills only what it adds."""

from __future__ import annotations

from pathlib import Path

from specplay.config.run_config import RequestConfig, RunConfig
from specplay.drafters import ModelConfig
from specplay.engine.conversation import Exchange, shared_prefix
from specplay.engine.events import DoneEvent, StartEvent
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.runner.session_run import run_sample
from specplay.store import load_session
from tests.support.prompts import CONVERSATION
from tests.support.scripted import ScriptedBackend, scripted_backend, scripted_engine


def _config(temperature: float, directory: Path) -> RunConfig:
    return RunConfig(
        target=ModelConfig("target", "target", "mlx", "/scripted"),
        drafters=(),
        request=RequestConfig(prompt=CONVERSATION[0], raw=True, follow_ups=CONVERSATION[1:]),
        settings=SpecSettings(sampling=SamplingParams(temperature), route="near"),
        sessions_dir=directory,
    )


def _target_prefills(backend: ScriptedBackend, marks: list[int]) -> list[int]:
    """Rows the target took in between each lane's end and the next one's start (`marks`, the
    forward passes made by each lane's start and end): the next lane's prefill."""
    windows = zip([0, *marks[1::2]], marks[0::2], strict=False)
    return [sum(rows for model, rows in backend.forwards[a:b] if model == "target") for a, b in windows]


def test_each_lane_goes_on_with_its_own_answers_and_its_own_caches(tmp_path: Path) -> None:
    backend = scripted_backend(drafters=("near",))
    engine = scripted_engine(backend)
    config = _config(1.0, tmp_path)  # sampled: the lanes' answers differ, and each continues its own
    request = Request(CONVERSATION[0], tuple(backend.encode(CONVERSATION[0], raw=True)), max_tokens=24, seed=2)
    marks: list[int] = []
    run = run_sample(
        engine,
        config,
        request,
        on_event=lambda lane, event: (
            marks.append(len(backend.forwards)) if isinstance(event, StartEvent | DoneEvent) else None
        ),
        save=True,
        baseline=True,
        follow_ups=config.request.follow_ups,
    )
    assert [turn.prompt for turn in run.turns] == list(CONVERSATION) and not run.cancelled
    assert any(turn.main.text != turn.baseline.text for turn in run.turns if turn.baseline)
    for lane in ("main", "baseline"):
        earlier: list[Exchange] = []
        for turn in run.turns:
            record = getattr(turn, lane)
            assert record.start.prompt_token_ids == tuple(backend.encode(turn.prompt, True, earlier))
            assert record.start.seed == 2
            earlier.append(Exchange(turn.prompt, record.text))
    # Lanes in order: turn 0's two, turn 1's two, ...; a later turn's prefill is only what it does
    # not share with the lane's own last generation (a cache leaves the last token for the next pass).
    prefills = _target_prefills(backend, marks)
    lanes = [getattr(turn, lane) for turn in run.turns for lane in ("main", "baseline")]
    for i, record in enumerate(lanes[2:], 2):
        before = lanes[i - 2]
        held, prompt = [*before.start.prompt_token_ids, *before.token_ids], record.start.prompt_token_ids
        cached = min(shared_prefix(held, prompt), len(held) - 1)
        assert prefills[i] == len(prompt) - 1 - cached and cached > len(prompt) / 3, i
    session = load_session(run.session)  # type: ignore[arg-type]
    assert session.complete and [t.main.token_ids for t in session.turns] == [t.main.token_ids for t in run.turns]
