"""Only the target ends its text: a drafter server that stops early (on an end-of-text or stop
token of its own) ends its draft, never the run; the target's own stop tokens end it as target-only
decoding ends it. Against protocol-faithful fake servers (tests/support/fake_vllm.py) over real HTTP."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from specplay.backends.mlx import MlxBackend
from specplay.backends.vllm import connect_vllm_backend
from specplay.engine.events import DoneEvent
from tests.support.engine_runs import done, rounds, run
from tests.support.fake_vllm import FakeVllm
from tests.support.tiny_models import TinyModels

PROMPT = "def parse(path):\n    with open(path) as f:\n        return"
TOKENS = 16


def target_text(backend: MlxBackend) -> tuple[int, ...]:
    """The tiny target's greedy text, stopping where its own end-of-text says."""
    return done(run(backend, PROMPT, mode="target", max_tokens=TOKENS, ignore_eos=False)).token_ids


def early_stops(backend: MlxBackend) -> frozenset[int]:
    """Tokens of the target's greedy text (not its own end-of-text): a drafter that ends its text
    on them stops early in every run of PROMPT."""
    return frozenset(target_text(backend)[1:5]) - backend.eos_token_ids


def with_end_of_text(model: Path, out: Path, eos_ids: frozenset[int]) -> Path:
    """A copy of `model` whose generation_config.json names other end-of-text tokens."""
    shutil.copytree(model, out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": sorted(eos_ids)}))
    return out


def same_text(speculative: DoneEvent, target_only: DoneEvent) -> None:
    assert speculative.token_ids == target_only.token_ids
    assert speculative.finish_reason == target_only.finish_reason


@pytest.fixture(scope="module", params=["end-of-text", "stop tokens"])
def early_drafter(
    request: pytest.FixtureRequest, tiny: TinyModels, backend: MlxBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeVllm]:
    """A drafter server that stops on tokens the target writes: as its own end-of-text
    (finish_reason "stop", no stop_reason) or as extra stop tokens (stop_reason names the token)."""
    stops = early_stops(backend)
    if request.param == "end-of-text":
        server = FakeVllm(with_end_of_text(tiny.near, tmp_path_factory.mktemp("eos") / "near", stops), "near")
    else:
        server = FakeVllm(tiny.near, "near", stop_token_ids=stops)
    yield server
    server.close()


@pytest.mark.parametrize("strategy", ["prompt-logprobs", "prefixes"])
def test_a_drafter_that_stops_early_never_ends_the_run(
    servers: tuple[FakeVllm, FakeVllm], early_drafter: FakeVllm, backend: MlxBackend, strategy: str
) -> None:
    target, _ = servers
    vllm = connect_vllm_backend(target.url, remote_drafters=[("early", early_drafter.url)], strategy=strategy)
    try:
        events = run(vllm, PROMPT, max_tokens=TOKENS, ignore_eos=False)
        assert any(len(r.drafted) < (r.k_asked or 0) for r in rounds(events))  # a draft ended early
        speculative = done(events)
        same_text(speculative, done(run(vllm, PROMPT, mode="target", max_tokens=TOKENS, ignore_eos=False)))
        assert speculative.token_ids == target_text(backend)
        assert not vllm.eos_token_ids & early_stops(backend)
    finally:
        vllm.close()


def test_the_targets_stop_tokens_end_neither_speculative_nor_target_only_text(
    tiny: TinyModels, backend: MlxBackend
) -> None:
    """A stop token of the target's generation config (stop_reason names it) is no end-of-text:
    target-only decoding streams past it, and so does every verify request that samples it."""
    stops = early_stops(backend)
    target, near = FakeVllm(tiny.target, "target", stop_token_ids=stops), FakeVllm(tiny.near, "near")
    try:
        vllm = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)], strategy="prefixes")
        target_only = done(run(vllm, PROMPT, mode="target", max_tokens=TOKENS, ignore_eos=False))
        assert target_only.token_ids == target_text(backend)
        same_text(done(run(vllm, PROMPT, max_tokens=TOKENS, ignore_eos=False)), target_only)
        assert not vllm.eos_token_ids & stops
        vllm.close()
    finally:
        target.close()
        near.close()


def test_a_local_drafters_end_of_text_never_ends_the_run(
    servers: tuple[FakeVllm, FakeVllm], tiny: TinyModels, backend: MlxBackend, tmp_path: Path
) -> None:
    """A local MLX drafter whose tokenizer names other end-of-text tokens: the target is asked
    about them, says no, and the text runs on as target-only's does."""
    target, _ = servers
    early = with_end_of_text(tiny.near, tmp_path / "near", early_stops(backend))
    vllm = connect_vllm_backend(target.url, local_drafters=[("early", str(early))])
    try:
        speculative = done(run(vllm, PROMPT, max_tokens=TOKENS, ignore_eos=False))
        same_text(speculative, done(run(vllm, PROMPT, mode="target", max_tokens=TOKENS, ignore_eos=False)))
        assert speculative.token_ids == target_text(backend)
    finally:
        vllm.close()


def test_an_end_of_text_the_drafter_shares_is_confirmed_by_the_target(
    servers: tuple[FakeVllm, FakeVllm], tiny: TinyModels, backend: MlxBackend, tmp_path: Path
) -> None:
    """Where the target's own end-of-text is also the local drafter's, the run ends on it even
    when it arrives as an accepted draft or a correction, which no target reply stops on."""
    target, _ = servers
    expected = target_text(backend)
    eos = expected[6]
    drafter = with_end_of_text(tiny.near, tmp_path / "near", frozenset({eos}))
    saved = target.backend.eos_token_ids
    target.backend.eos_token_ids = frozenset({eos})
    try:
        vllm = connect_vllm_backend(target.url, local_drafters=[("near", str(drafter))])
        finished = done(run(vllm, PROMPT, max_tokens=TOKENS, ignore_eos=False))
        assert finished.token_ids == expected[: expected.index(eos)] and finished.finish_reason == "stop"
        vllm.close()
    finally:
        target.backend.eos_token_ids = saved
