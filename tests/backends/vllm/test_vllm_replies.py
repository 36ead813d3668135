"""vLLM's replies, mutated from real ones: every reply parses or is one VllmError, never a traceback."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.protocol import completion_body, parse_choices, stream_choices
from specplay.engine.settings import SamplingParams
from tests.support.fake_vllm import FakeVllm
from tests.support.mutations import JSON_VALUES, paths, replace_at


@pytest.fixture(scope="module")
def replies(servers: tuple[FakeVllm, FakeVllm]) -> list[dict[str, Any]]:
    """Real completions: sampled with logprobs, with prompt logprobs, and several choices."""
    target, _ = servers
    client = VllmClient("target", target.url)
    bodies = [
        completion_body("target", [5, 6, 7], max_tokens=3, sampling=SamplingParams(1.0), seed=1, logprobs=5),
        completion_body(
            "target", [5, 6, 7, 8], max_tokens=1, sampling=SamplingParams(0.7), seed=2, logprobs=5, prompt_logprobs=5
        ),
        completion_body("target", [[5, 6], [5, 6, 7]], max_tokens=1, sampling=SamplingParams(1.0), seed=3, logprobs=5),
    ]
    out = [client.post_json("/v1/completions", body) for body in bodies]
    client.close()
    return out


FUZZ = settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(data=st.data())
def test_mutated_replies_parse_or_fail_in_one_line(replies: list[dict[str, Any]], data: Any) -> None:
    reply = copy.deepcopy(data.draw(st.sampled_from(replies)))
    for _ in range(data.draw(st.integers(1, 3))):
        reply = replace_at(reply, data.draw(st.sampled_from(paths(reply))), data.draw(JSON_VALUES))
    expected = len(replies[0]["choices"]) if isinstance(reply, dict) else 1
    for need_logprobs in (True, False):
        try:
            choices = parse_choices(reply, "vLLM server 'x'", expected, need_logprobs)
        except VllmError as error:
            assert "\n" not in str(error)
            continue
        for choice in choices:  # what parsed is what the lanes rely on
            # whatever a mutated reply keeps, possibly nothing, is well typed
            assert all(isinstance(t, int) for t in choice.token_ids)
            assert all(isinstance(lp, float) and lp <= 0 for row in choice.top_logprobs for lp in row.values())
    try:
        stream_choices(reply, "vLLM server 'x'")
    except VllmError as error:
        assert "\n" not in str(error)


@pytest.mark.parametrize("key", ["²", "٣", "1.5", ""])
def test_a_token_id_that_is_not_ascii_digits_is_one_error(replies: list[dict[str, Any]], key: str) -> None:
    reply = copy.deepcopy(replies[1])
    entries = reply["choices"][0]["prompt_logprobs"]
    row = next(e for e in entries if e)
    row[key] = next(iter(row.values()))
    with pytest.raises(VllmError, match="prompt_logprobs"):
        parse_choices(reply, "vLLM server 'x'", 1, True)
