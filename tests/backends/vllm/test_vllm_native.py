"""Native mode: a fake vLLM server that speculates itself, watched from specplay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specplay.backends.mlx import MlxBackend
from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.native import NativeServer, recolour
from specplay.backends.vllm.native_stream import connect_native
from specplay.engine.events import DoneEvent, Event, RecolourEvent, RoundEvent, StartEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.ui.protocols import RunState
from tests.support.checks import every
from tests.support.engine_runs import chunk_sources, done, run
from tests.support.fake_vllm import FakeVllm
from tests.support.tiny_models import TinyModels

PROMPT = "def parse(path):\n    with open(path) as f:\n        return"


@pytest.fixture(scope="module")
def native(tiny) -> Iterator[FakeVllm]:  # type: ignore[no-untyped-def]
    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2, spec_metrics="detailed")
    yield server
    server.close()


def test_native_server_reads_k_from_its_counters(native: FakeVllm) -> None:
    client = VllmClient("target", native.url)
    assert NativeServer(client).k == 2  # from the per-position counters
    client.close()


def _events(server_url: str, max_tokens: int, ignore_eos: bool = True) -> list[Event]:
    source = connect_native(server_url)
    try:
        token_ids = tuple(source.encode(PROMPT, raw=True))
        request = Request(PROMPT, token_ids, "speculative", 0, max_tokens, ignore_eos)
        return list(source.generate(request, LiveControls(SpecSettings(), source.drafters)))
    finally:
        source.close()


def test_native_runs_as_engine_events_recoloured_at_the_end(native: FakeVllm, backend: MlxBackend) -> None:
    events = _events(native.url, 16)
    start, first, *rounds, recoloured, finished = events
    assert isinstance(start, StartEvent) and start.drafter == "server"
    assert isinstance(first, StepEvent) and first.token.source == "target"  # prefill: the target alone
    assert every(isinstance(r, RoundEvent) and not r.positions for r in rounds)  # native reports no probabilities
    assert isinstance(recoloured, RecolourEvent) and recoloured.exact
    assert isinstance(finished, DoneEvent)
    assert finished.token_ids == done(run(backend, PROMPT, mode="target", max_tokens=16)).token_ids
    server = finished.metrics["server"]
    speculative_decoding = server["speculative_decoding"]
    assert server["sources_exact"] and server["k"] == 2
    assert list(recoloured.sources) == recolour(
        16, speculative_decoding["per_step_accepted"], speculative_decoding["per_step_drafted"]
    )
    streamed = [first.token.source] + [t.source for r in rounds for t in r.tokens]  # type: ignore[union-attr]
    sizes = [1] + [len(r.tokens) for r in rounds]  # type: ignore[union-attr]
    assert streamed == chunk_sources(sizes, 2)  # the live guess, before the server's account
    # the guess agrees here, since the fake streams one chunk per step and keeps up; the last
    # step was cut by max_tokens, so its last token is a correction only to the guess
    assert streamed[:15] == list(recoloured.sources)[:15]
    counters = server["counters_delta"]
    assert counters["vllm:spec_decode_num_drafts_total"] == speculative_decoding["num_spec_steps"]
    assert counters["vllm:generation_tokens_total"] == 16 and not server["counters_contaminated"]
    # the server's own counts replace the guess; per-position acceptance comes from /metrics
    assert finished.metrics["mean_acceptance_length"] == speculative_decoding["mean_acceptance_length"]
    steps = speculative_decoding["per_step_accepted"]
    expected = [sum(a > i for a in steps) / len(steps) for i in range(2)]
    assert finished.metrics["acceptance_per_position"] == pytest.approx(expected)
    assert "".join(t.text for t in [first.token, *(t for r in rounds for t in r.tokens)]) == finished.text  # type: ignore[union-attr]


def test_native_events_without_per_step_metrics_keep_the_guess(tiny) -> None:  # type: ignore[no-untyped-def]
    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2, spec_metrics=None)
    try:
        events = _events(server.url, 8)
        assert not any(isinstance(e, RecolourEvent) for e in events)
        finished = events[-1]
        assert isinstance(finished, DoneEvent) and not finished.metrics["server"]["sources_exact"]
        assert len(finished.token_ids) == 8 and finished.metrics["server"]["speculative_decoding"] is None
        assert finished.metrics["server"]["counters_delta"]["vllm:spec_decode_num_drafts_total"] > 0
    finally:
        server.close()


async def test_playground_watches_native_speculation_against_a_baseline(
    tiny: TinyModels, native: FakeVllm, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from specplay.config.run_config import VllmOptions
    from specplay.store import load_session
    from specplay.ui.widgets.controls_panel import ControlsPanel
    from specplay.ui.widgets.lane_view import LaneView
    from specplay.ui.widgets.plots import Plots
    from specplay.ui.widgets.stats_view import StatsText
    from tests.support.ui_helpers import app_for, server_config, wait_for

    plain = FakeVllm(tiny.target, "target")
    try:
        options = VllmOptions(native=True, baseline_url=plain.url)
        request = {"prompt": PROMPT, "max_tokens": 12, "raw": True, "ignore_eos": True}
        app = app_for(server_config(native.url, {}, tmp_path, vllm=options, **request), autorun=True)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_for(pilot, lambda: app.playground.state == RunState.RUNNING, "the autorun to start")
            await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the run to finish")
            assert app.playground.lanes == ("speculative", "target")
            assert not app.playground.capabilities.live_controls
            panel = app.query_one(ControlsPanel)
            assert panel.query_one("#k").disabled and panel.query_one("#route").disabled  # the server's, one server
            lane = app.query_one("#speculative", LaneView)
            stats = str(lane.query_one(StatsText).stats)  # the text, unwrapped
            assert "k 2 (server)" in stats and "colours exact" in stats and "measured against the baseline" in stats
            assert " 2 " in str(app.query_one(Plots).render())  # per-position bars from the server's counters
            recoloured = next(e for e in app.playground.events["speculative"] if isinstance(e, RecolourEvent))
            assert [pick.token.source for pick in lane.picks] == list(recoloured.sources)
            target_ids = app.playground.events["target"][-1].token_ids  # type: ignore[union-attr]
            assert app.playground.events["speculative"][-1].token_ids == target_ids  # type: ignore[union-attr]
            assert app.playground.last_session is not None
            session = load_session(app.playground.last_session)
            assert session.main.sources == list(recoloured.sources) and session.header["backend"]["mode"] == "native"
    finally:
        plain.close()


async def test_playground_in_native_mode_without_a_baseline_says_how_to_compare(native: FakeVllm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specplay.config.run_config import VllmOptions
    from specplay.ui.widgets.lane_view import LaneView
    from tests.support.ui_helpers import app_for, server_config, wait_for

    config = server_config(
        native.url, {}, tmp_path, vllm=VllmOptions(native=True), prompt=PROMPT, max_tokens=6, raw=True
    )
    app = app_for(config, autorun=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.RUNNING, "the autorun to start")
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the run to finish")
        assert app.playground.lanes == ("speculative",)
        assert "--baseline-url" in str(app.query_one("#target", LaneView).query_one(".lane-stats").render())


def test_a_server_that_streams_no_token_ids_is_a_clear_error(native: FakeVllm, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from specplay.backends.vllm import native_stream
    from specplay.backends.vllm.errors import VllmError

    old_body = native_stream.completion_body
    monkeypatch.setattr(
        native_stream, "completion_body", lambda *a, **kw: old_body(*a, **kw) | {"return_token_ids": False}
    )
    with pytest.raises(VllmError, match=r"streamed no token_ids; it needs vLLM 0\.10\.2"):
        _events(native.url, 4)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"per_step_accepted": [3, 1]}, "per_step_accepted"),  # 3 accepted of 2 drafted
        ({"per_step_accepted": [1]}, "per_step_accepted"),  # shorter than per_step_drafted
        ({"per_step_drafted": "2,2"}, "per_step_accepted"),
        ({"num_spec_tokens": -1}, "num_spec_tokens"),
        ({"num_draft_tokens": True}, "num_draft_tokens"),
        ({"mean_acceptance_length": float("nan")}, "mean_acceptance_length"),
        ({"draft_acceptance_rate": "high"}, "draft_acceptance_rate"),
    ],
)
def test_the_servers_speculation_metrics_are_checked(change: dict[str, object], field: str) -> None:
    from specplay.backends.vllm.errors import VllmError
    from specplay.backends.vllm.native import speculative_metrics

    good = {"num_spec_tokens": 2, "num_spec_steps": 2, "num_draft_tokens": 4, "num_accepted_draft_tokens": 3}
    good |= {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.75, "acceptance_histogram": [0, 1, 1]}
    good |= {"per_step_accepted": [2, 1], "per_step_drafted": [2, 2], "unknown": float("nan")}
    kept = speculative_metrics(good, "server 'x'")
    assert "unknown" not in kept and "acceptance_histogram" not in kept and kept["per_step_accepted"] == [2, 1]
    with pytest.raises(VllmError, match=f"server 'x' sent metrics.speculative_decoding.{field} that is not"):
        speculative_metrics(good | change, "server 'x'")
    with pytest.raises(VllmError, match=r"sent metrics\.speculative_decoding that is not an object"):
        speculative_metrics([good], "server 'x'")


def test_counters_that_are_not_finite_or_have_odd_positions_are_skipped() -> None:
    from specplay.backends.vllm.native import PER_POSITION, parse_prometheus

    text = "\n".join(
        [
            'vllm:spec_decode_num_drafts_total{engine="0"} NaN',
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} +Inf',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 7',
            f'{PER_POSITION}{{engine="0",position="0"}} 5',
            f'{PER_POSITION}{{engine="1",position="0"}} 1',
            f'{PER_POSITION}{{engine="0",position="x"}} 9',
            f'{PER_POSITION}{{engine="0",position="²"}} 9',
        ]
    )
    assert parse_prometheus(text) == {"vllm:spec_decode_num_accepted_tokens_total": 7.0, f"{PER_POSITION}[0]": 6.0}


def test_native_output_stops_where_the_servers_context_ends(tiny) -> None:  # type: ignore[no-untyped-def]
    """Asked for more than fits, the run ends at the context ("length"), as a local run does,
    instead of in the server's HTTP 400; a baseline of a shorter context cuts both lanes."""
    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2, max_model_len=40)
    baseline = FakeVllm(tiny.target, "target", max_model_len=30)
    try:
        events = _events(server.url, 4000)
        finished = events[-1]
        prompt = events[0]
        assert isinstance(prompt, StartEvent) and isinstance(finished, DoneEvent)
        assert finished.finish_reason == "length" and len(prompt.prompt_token_ids) + len(finished.token_ids) == 40
        source = connect_native(server.url, baseline_url=baseline.url)
        try:
            token_ids = tuple(source.encode(PROMPT, raw=True))
            for mode in ("speculative", "target"):
                request = Request(PROMPT, token_ids, mode, 0, 4000, True)  # type: ignore[arg-type]
                done_event = list(source.generate(request, LiveControls(SpecSettings(), source.drafters)))[-1]
                assert isinstance(done_event, DoneEvent) and len(token_ids) + len(done_event.token_ids) == 30, mode
        finally:
            source.close()
    finally:
        server.close()
        baseline.close()
