"""Native mode: a fake vLLM server that speculates itself, watched from specplay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_vllm import FakeVllm
from helpers import done, run

from specplay.backends.mlx import MlxBackend
from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.connect import tokenize
from specplay.backends.vllm.native import NativeServer, chunk_sources, recolour
from specplay.engine.settings import SamplingParams

PROMPT = "def parse(path):\n    with open(path) as f:\n        return"


@pytest.fixture(scope="module")
def native(tiny) -> Iterator[FakeVllm]:  # type: ignore[no-untyped-def]
    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2, spec_metrics="detailed")
    yield server
    server.close()


def test_native_recolours_exactly_from_per_step_arrays(native: FakeVllm, backend: MlxBackend) -> None:
    client = VllmClient("target", native.url)
    server = NativeServer(client)
    assert server.k == 2  # from the per-position counters
    ids = tokenize(client, server.model, PROMPT)
    result = server.generate(ids, SamplingParams(0.0), 0, 16, True)
    # lossless greedy speculation emits exactly the target's greedy tokens
    assert tuple(result.token_ids) == done(run(backend, PROMPT, mode="target", max_tokens=16)).token_ids
    assert result.exact and len(result.sources) == 16 and result.sources[0] == "target"
    spec = result.spec_metrics
    assert spec is not None and len(spec["per_step_accepted"]) == spec["num_spec_steps"]
    assert result.sources == recolour(16, spec["per_step_accepted"], spec["per_step_drafted"])
    assert result.counters["vllm:spec_decode_num_drafts_total"] == spec["num_spec_steps"]
    assert result.counters["vllm:generation_tokens_total"] == 16
    assert not result.counters_contaminated
    # the chunk heuristic agrees here, since the fake streams one chunk per step and keeps up
    assert result.chunk_sizes[0] == 1 and sum(result.chunk_sizes) == 16
    assert chunk_sources(result.chunk_sizes, 2)[:15] == result.sources[:15]  # the last step was cut by max_tokens
    client.close()


def test_native_without_per_step_metrics_falls_back_to_chunks(tiny) -> None:  # type: ignore[no-untyped-def]
    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2, spec_metrics=None)
    client = VllmClient("target", server.url)
    try:
        result = NativeServer(client).generate(tokenize(client, "target", PROMPT), SamplingParams(0.0), 0, 12, True)
        assert not result.exact and result.spec_metrics is None
        assert len(result.sources) == 12 and result.sources[0] == "target"
        assert result.counters["vllm:spec_decode_num_drafts_total"] > 0
    finally:
        client.close()
        server.close()
