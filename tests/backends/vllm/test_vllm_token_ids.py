"""Token ids from a server are checked where they arrive (protocol.py) against the vocabulary of
the models that will read them: generated tokens, top_logprobs and prompt_logprobs keys and
/tokenize. A bad id (-1, 10^9) stops the run in one line naming the server; it never reaches a
local drafter (where MLX would crash) or another server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.protocol import parse_choices, stream_choices, token_ids_reply
from tests.support.fake_vllm import FakeVllm
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

ROOT = Path(__file__).resolve().parents[3]
WHERE = "vLLM server 'target' (http://gpu:8000)"
BAD = [-1, 10**9, 100]  # 100: the first id past a vocabulary of 100


def _reply(token_ids: list[int], top: dict[str, float], prompt: list[Any] | None = None) -> dict[str, Any]:
    logprobs = {"top_logprobs": [top]}
    return {"choices": [{"index": 0, "token_ids": token_ids, "logprobs": logprobs, "prompt_logprobs": prompt}]}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("field", ["token_ids", "top_logprobs", "prompt_logprobs", "stream", "tokenize"])
def test_every_id_a_reply_carries_is_checked(field: str, bad: int) -> None:
    replies = {
        "token_ids": lambda: parse_choices(_reply([3, bad], {"token_id:3": -0.1}), WHERE, 1, True, 100),
        "top_logprobs": lambda: parse_choices(
            _reply([3], {"token_id:3": -0.1, f"token_id:{bad}": -2.0}), WHERE, 1, True, 100
        ),
        "prompt_logprobs": lambda: parse_choices(
            _reply([3], {"token_id:3": -0.1}, [None, {str(bad): {"logprob": -1.0, "rank": 1}}]), WHERE, 1, True, 100
        ),
        "stream": lambda: stream_choices({"choices": [{"token_ids": [bad], "text": "x"}]}, WHERE, 100),
        "tokenize": lambda: token_ids_reply({"tokens": [1, bad]}, WHERE, 100),
    }
    with pytest.raises(VllmError, match=f"sent token id {bad}, outside the vocabulary of 100 tokens") as caught:
        replies[field]()
    assert str(caught.value).startswith(WHERE) and "\n" not in str(caught.value)
    edges = _reply([99, 0], {"token_id:99": -0.1, "token_id:0": -2.0})  # each generated token listed, as vLLM does
    assert parse_choices(edges, WHERE, 1, True, 100)[0].token_ids == [99, 0]


@pytest.mark.parametrize("key", ["token_id:--5", "token_id:", "token_id:1e3", "token_id:" + "9" * 21])
def test_a_malformed_id_key_is_one_line(key: str) -> None:
    with pytest.raises(VllmError, match="instead of token_id:N") as caught:
        parse_choices(_reply([3], {"token_id:3": -0.1, key: -2.0}), WHERE, 1, True, 100)
    assert "\n" not in str(caught.value)


TAMPERED = """
import sys

from specplay.backends.vllm.client import VllmClient
from specplay.cli import main

field, bad, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
real, completions = VllmClient.post_json, [0]


def post_json(self, path, body):  # the target's replies, once it is connected, with `bad` in `field`
    reply = real(self, path, body)
    if self.name != "target":
        return reply
    if path == "/v1/completions":
        completions[0] += 1
        if completions[0] > 2:  # past connect's two probes
            for choice in reply["choices"]:
                if field == "token_ids":
                    choice["token_ids"][-1] = bad
                elif field == "top_logprobs":
                    choice["logprobs"]["top_logprobs"][-1][f"token_id:{bad}"] = -0.5
    if path == "/tokenize" and field == "tokenize" and body.get("prompt") == prompt:
        reply["tokens"].append(bad)
    return reply


VllmClient.post_json = post_json
sys.exit(main(sys.argv[4:]))
"""


def _run_tampered(field: str, bad: int, args: list[str]) -> subprocess.CompletedProcess[str]:
    """A run in a process of its own (a bad id that got through would crash MLX, and with it the
    test process), its target's replies tampered with as they arrive."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", TAMPERED, field, str(bad), CODE_PROMPT, "run", *args, *ARGS]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


ARGS = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "6", "--ignore-eos", "--temperature", "0"]


@pytest.mark.parametrize("bad", [-1, 10**9, "past"])
@pytest.mark.parametrize("field", ["token_ids", "top_logprobs", "tokenize"])
def test_a_bad_id_stops_a_run_with_a_local_drafter_in_one_line(
    field: str,
    bad: int | str,
    tiny: TinyModels,
    servers: tuple[FakeVllm, FakeVllm],
) -> None:
    target, _ = servers
    bad = target.vocab_size if bad == "past" else bad  # the first id past the drafter's vocabulary
    result = _run_tampered(
        field, bad, ["--backend", "vllm", "--target-url", target.url, "--draft", f"local={tiny.near}"]
    )
    err = result.stderr
    last = err.strip().splitlines()[-1]
    assert result.returncode == 2 and "Traceback" not in err, err[-2000:]
    assert "vLLM server 'target'" in last and f"sent token id {bad}, outside the vocabulary" in last, err


@pytest.mark.parametrize("bad", [-1, 10**9])
def test_a_bad_id_is_never_passed_on_to_a_drafter_server(
    bad: int,
    servers: tuple[FakeVllm, FakeVllm],
) -> None:
    target, near = servers
    seen = len(near.requests)
    result = _run_tampered(
        "token_ids", bad, ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    )
    err = result.stderr
    assert result.returncode == 2 and "vLLM server 'target'" in err.strip().splitlines()[-1], err[-2000:]
    sent = [body.get("prompt") for path, body in near.requests[seen:] if path == "/v1/completions"]
    assert all(bad not in (p if isinstance(p, list) else []) for p in sent), sent
