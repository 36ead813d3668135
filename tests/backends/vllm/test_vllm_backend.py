"""The vLLM backend against protocol-faithful fake servers (tests/support/fake_vllm.py) over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from specplay.backends.mlx import MlxBackend
from specplay.backends.vllm import VllmBackend, VllmError, connect_vllm_backend
from specplay.backends.vllm.protocol import completion_body
from specplay.backends.vllm.report import inspection_report
from specplay.engine.events import Event
from specplay.engine.settings import SamplingParams
from tests.support.checks import every
from tests.support.engine_runs import done, rounds, run
from tests.support.fake_vllm import FakeVllm, Fault

PROMPT = "def parse(path):\n    with open(path) as f:\n        return"
TOKENS = 16


@pytest.fixture(scope="module")
def vllm(servers: tuple[FakeVllm, FakeVllm]) -> Iterator[VllmBackend]:
    target, near = servers
    backend = connect_vllm_backend(target.url + "/v1", remote_drafters=[("near", near.url)])
    yield backend
    backend.close()


@pytest.fixture(autouse=True)
def no_faults(servers: tuple[FakeVllm, FakeVllm]) -> Iterator[None]:
    yield
    for server in servers:
        server.fault = None


def mlx_target_only(backend: MlxBackend) -> tuple[int, ...]:
    return done(run(backend, PROMPT, mode="target", max_tokens=TOKENS)).token_ids


def test_greedy_equals_mlx_greedy_target_only(vllm: VllmBackend, backend: MlxBackend) -> None:
    expected = mlx_target_only(backend)
    speculative = run(vllm, PROMPT, max_tokens=TOKENS)
    assert done(speculative).token_ids == expected
    assert done(run(vllm, PROMPT, mode="target", max_tokens=TOKENS)).token_ids == expected
    assert every(p.error_bound is None for r in rounds(speculative) for p in r.positions)  # greedy is exact
    assert done(speculative).metrics["vllm"]["verify_strategies"] == {"prompt-logprobs": len(rounds(speculative))}
    mlx_text = done(run(backend, PROMPT, mode="target", max_tokens=TOKENS)).text
    assert done(speculative).text == mlx_text


def test_route_none_is_the_servers_target_decoding(vllm: VllmBackend, backend: MlxBackend) -> None:
    """No speculation over HTTP: the target's tokens from its own stream, as target-only decoding
    streams them (no verify request), greedy and sampled alike in count; where a round must be
    judged (adaptive routing), one completion of the context, not a prompt-logprobs recompute."""
    events = run(vllm, PROMPT, max_tokens=TOKENS, route="none")
    assert done(events).token_ids == mlx_target_only(backend)
    assert every(r.nodes == 0 and r.drafter == "none" for r in rounds(events))
    assert done(events).metrics["vllm"]["verify_strategies"] == {}
    sampled = run(vllm, PROMPT, max_tokens=TOKENS, route="none", temperature=1.0, seed=2)
    assert len(done(sampled).token_ids) == TOKENS and {t.source for r in rounds(sampled) for t in r.tokens} == {
        "target"
    }


def test_rejection_ranks_from_the_drafters_listed_logprobs(vllm: VllmBackend, backend: MlxBackend) -> None:
    # Greedy: the drafter server's top logprobs rank each correction as MLX ranks it from the full row.
    def ranks(events: list[Event]) -> list[int | None]:
        return [p.correction_rank for r in rounds(events) for p in r.positions if p.outcome == "rejected"]

    served = run(vllm, PROMPT, max_tokens=32, route="near")
    assert ranks(served) and ranks(served) == ranks(run(backend, PROMPT, max_tokens=32, route="near"))
    assert done(served).metrics["second_branch_share"] is not None
    sampled = run(vllm, PROMPT, max_tokens=32, temperature=1.0, seed=3, route="near")
    assert ranks(sampled) and None not in ranks(sampled)


def test_prefix_strategy_gives_the_same_greedy_output(servers: tuple[FakeVllm, FakeVllm], backend: MlxBackend) -> None:
    target, near = servers
    vllm = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)], strategy="prefixes")
    before = len(target.requests)
    finished = done(run(vllm, PROMPT, max_tokens=TOKENS))
    assert finished.token_ids == mlx_target_only(backend)
    assert set(finished.metrics["vllm"]["verify_strategies"]) == {"prefixes"}
    verifies = [body for path, body in target.requests[before:] if path == "/v1/completions"]
    assert verifies and every(
        isinstance(body["prompt"][0], list) and "prompt_logprobs" not in body for body in verifies
    )
    vllm.close()


def test_sampled_rounds_carry_the_tv_bracket_and_error_bound(
    vllm: VllmBackend, servers: tuple[FakeVllm, FakeVllm]
) -> None:
    events = run(vllm, PROMPT, max_tokens=TOKENS, temperature=1.0, tv_budget=0.3, seed=3)
    judged = [p for r in rounds(events) for p in r.positions if p.outcome != "unreached"]
    assert judged
    for position in judged:
        assert position.tv_lower is not None and position.error_bound is not None
        assert 0 <= position.tv_lower <= position.tv_distance <= 1
        assert position.theta == pytest.approx(min(1.0, 0.3 / position.tv_distance))
    report = inspection_report(done(events).metrics)
    assert report["tokens_per_target_call"] == done(events).metrics["mean_acceptance_length"]
    assert report["modelled_speedup"] is not None and report["approximate"]
    again = run(vllm, PROMPT, max_tokens=TOKENS, temperature=1.0, tv_budget=0.3, seed=3)
    assert done(again).token_ids == done(events).token_ids  # seeds derive from the engine's draws
    # every sampling parameter is sent, so the server's generation_config.json never fills them in
    target, _ = servers
    body = next(body for path, body in reversed(target.requests) if path == "/v1/completions")
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "logprobs"):
        assert name in body
    assert body["return_tokens_as_token_ids"] and body["return_token_ids"]


def test_mixed_mode_local_drafter_remote_target(tiny, servers: tuple[FakeVllm, FakeVllm], backend: MlxBackend) -> None:  # type: ignore[no-untyped-def]
    target, _ = servers
    mixed = connect_vllm_backend(target.url, local_drafters=[("near", str(tiny.near))])
    assert mixed.drafters == ("near",)
    assert done(run(mixed, PROMPT, max_tokens=TOKENS)).token_ids == mlx_target_only(backend)
    events = run(mixed, PROMPT, max_tokens=TOKENS, temperature=1.0, seed=1)
    assert every(p.error_bound is not None for r in rounds(events) for p in r.positions)
    assert "weights_sha256" in mixed.describe()["models"]["near"]
    mixed.close()


def test_connect_checks_max_logprobs(tiny) -> None:  # type: ignore[no-untyped-def]
    server = FakeVllm(tiny.target, "target", max_logprobs=5)
    try:
        with pytest.raises(VllmError, match="--max-logprobs 20"):
            connect_vllm_backend(server.url, top_logprobs=20)
        assert connect_vllm_backend(server.url, top_logprobs=5).target.top_logprobs == 5
    finally:
        server.close()


def test_connect_checks_tokenizers_agree_and_closes_what_it_opened(
    tiny, servers: tuple[FakeVllm, FakeVllm], monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from specplay.backends.vllm.client import VllmClient

    closed: list[str] = []
    original = VllmClient.close
    monkeypatch.setattr(VllmClient, "close", lambda self: (closed.append(self.name), original(self))[1])
    other = FakeVllm(tiny.other_vocab, "other")
    try:
        with pytest.raises(VllmError, match="does not tokenize like"):
            connect_vllm_backend(servers[0].url, remote_drafters=[("other", other.url)])
        assert sorted(closed) == ["other", "target"]  # a refused connection leaves no client open
    finally:
        other.close()


def test_api_key_is_sent_but_never_recorded(tiny) -> None:  # type: ignore[no-untyped-def]
    server = FakeVllm(tiny.target, "target", api_key="s3cret-key")
    try:
        with pytest.raises(VllmError, match="API key"):
            connect_vllm_backend(server.url)
        vllm = connect_vllm_backend(server.url, api_key="s3cret-key")
        assert server.headers[-1]["Authorization"] == "Bearer s3cret-key"
        assert "s3cret" not in json.dumps(vllm.describe()) + repr(vllm.target.client)
    finally:
        server.close()


def test_http_400_is_shown_as_it_came(vllm: VllmBackend) -> None:
    body = completion_body("target", [1, 2, 3], max_tokens=1, sampling=SamplingParams(1.0), seed=0, logprobs=50)
    with pytest.raises(VllmError, match="Requested sample logprobs of 50, which is greater than max allowed: 20"):
        vllm.target.client.post_json("/v1/completions", body)


@pytest.mark.parametrize(
    ("kind", "message"), [("http500", "HTTP 500"), ("malformed", "not JSON"), ("slow", "did not answer")]
)
def test_server_faults_mid_run_are_clear_errors(servers: tuple[FakeVllm, FakeVllm], kind: str, message: str) -> None:
    target, near = servers
    # The timeout leaves room for a loaded machine; only the slow fault outlasts it.
    vllm = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)], timeout_s=2.0)
    target.fault = Fault(kind, after=target.num_completions + 2, delay_s=4.0)
    with pytest.raises(VllmError, match=message):
        run(vllm, PROMPT, max_tokens=TOKENS)
    vllm.close()


def test_server_killed_mid_run(tiny) -> None:  # type: ignore[no-untyped-def]
    target, near = FakeVllm(tiny.target, "target"), FakeVllm(tiny.near, "near")
    try:
        vllm = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)])
        target.fault = Fault("die", after=target.num_completions + 2)
        with pytest.raises(VllmError, match="target"):
            run(vllm, PROMPT, max_tokens=TOKENS)
    finally:
        target.fault = None
        near.close()
        target.thread.close()


def test_eos_is_learned_from_servers_that_stop_on_it(servers: tuple[FakeVllm, FakeVllm], backend: MlxBackend) -> None:
    target, near = servers
    expected = mlx_target_only(backend)
    eos = expected[6]
    stop_at = expected.index(eos)
    saved = target.backend.eos_token_ids, near.backend.eos_token_ids
    target.backend.eos_token_ids = near.backend.eos_token_ids = frozenset({eos})
    try:
        vllm = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)])
        for mode in ("speculative", "target"):
            finished = done(run(vllm, PROMPT, mode=mode, max_tokens=TOKENS, ignore_eos=False))
            assert finished.token_ids == expected[:stop_at] and finished.finish_reason == "stop"
        assert eos in vllm.eos_token_ids
        vllm.close()
    finally:
        target.backend.eos_token_ids, near.backend.eos_token_ids = saved


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("trickle", "took longer than --timeout 3 s to send /v1/completions"),
        ("huge_error", "answered HTTP 500 on /v1/completions: "),  # cut short, however long the page
        ("bad_logprobs", "sent a logprob of 'high' in a shape specplay does not know"),
    ],
)
def test_hostile_servers_are_one_bounded_line(servers: tuple[FakeVllm, FakeVllm], kind: str, message: str) -> None:
    from specplay.errors import error_line

    target, near = servers
    vllm = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)], timeout_s=3.0)
    target.fault = Fault(kind, after=target.num_completions, delay_s=1.0)  # a byte a second: never a read timeout
    start = time.monotonic()
    with pytest.raises(VllmError) as error:
        run(vllm, PROMPT, max_tokens=TOKENS, temperature=1.0)
    line = error_line(error.value)
    assert message in line and "\n" not in line and "\x1b" not in line and len(line) < 600, line
    assert time.monotonic() - start < 30  # one deadline, not hours of trickle
    vllm.close()


def test_a_stream_event_that_is_not_an_object_is_one_line(servers: tuple[FakeVllm, FakeVllm]) -> None:
    target, _ = servers
    vllm = connect_vllm_backend(target.url)
    target.fault = Fault("array_event", after=target.num_completions)
    with pytest.raises(VllmError, match="sent a stream event in a shape specplay does not know"):
        run(vllm, PROMPT, mode="target", max_tokens=TOKENS)
    vllm.close()


def test_adaptive_routing_between_a_server_drafter_and_a_local_one(  # type: ignore[no-untyped-def]
    tiny, servers: tuple[FakeVllm, FakeVllm], backend: MlxBackend
) -> None:
    """Per-round routing over HTTP: the text is greedy target-only's, both drafters serve rounds,
    and only the local drafter catches a cache up (a server's prefix cache is its own)."""
    target, near = servers
    mixed = connect_vllm_backend(
        target.url, remote_drafters=[("near", near.url)], local_drafters=[("local", str(tiny.near))]
    )
    events = run(mixed, PROMPT, route="adaptive", max_tokens=TOKENS * 2)
    prompt_tokens = len(mixed.encode(PROMPT, raw=True))
    mixed.close()
    expected = done(run(backend, PROMPT, mode="target", max_tokens=TOKENS * 2)).token_ids
    assert done(events).token_ids == expected
    served = [r.drafter for r in rounds(events)]
    # none serves only where, priced at the verify pass, it might win: timed once, retried, or never.
    assert {"near", "local"} <= set(served) <= {"near", "local", "none"} and served.count("none") <= 2
    assert every(r.catch_up_tokens == 0 for r in rounds(events) if r.drafter == "near")
    first_local = next(r for r in rounds(events) if r.drafter == "local")
    assert first_local.catch_up_tokens == prompt_tokens + first_local.token_index - 1
    assert done(events).metrics["route_switches"] >= 1
