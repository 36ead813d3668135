"""Servers that are not what they claim: a reply never ends, runs on without a line break, grows
without bound, or redirects elsewhere. Each ends in one VllmError within --timeout, in bounded
memory, and the API key never leaves for a host the user did not name."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from specplay.backends.vllm import client as client_module
from specplay.backends.vllm.client import MAX_REPLY_BYTES, VllmClient
from specplay.backends.vllm.connect import served_model
from specplay.backends.vllm.errors import VllmError
from specplay.errors import error_line
from tests.support.fake_vllm import FakeVllm, Fault
from tests.support.logging_server import LoggingServer, endless, redirect
from tests.support.peak_memory import run_with_peak_mib
from tests.support.tiny_models import TinyModels

KEY = "sk-live-Zq9s3cret"

ENDLESS = {
    "events every 0.1 s": (b"data: {}\n\n", 0.1),
    "keep-alives every 0.1 s": (b": keep-alive\n\n", 0.1),
    "one line without end": (b"x" * 512, 0.01),
    "a byte every 0.3 s": (b"d", 0.3),
}


@pytest.fixture
def server() -> Iterator[LoggingServer]:
    made = LoggingServer()
    yield made
    made.close()


@pytest.mark.parametrize("piece, every_s", ENDLESS.values(), ids=ENDLESS.keys())
def test_a_stream_without_end_stops_at_the_timeout(server: LoggingServer, piece: bytes, every_s: float) -> None:
    """--timeout bounds the whole reply: a stream that keeps coming, each piece well within the
    timeout of the one before, is cut at it."""
    server.answer = endless(piece, every_s)
    client = VllmClient("target", server.url, timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(VllmError, match=r"took longer than --timeout 1\.5 s") as caught:
        list(client.post_sse("/v1/completions", {"stream": True}))
    assert time.monotonic() - started < 5
    assert "\n" not in error_line(caught.value)
    client.close()


def test_a_reply_larger_than_any_completion_is_refused(server: LoggingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast reply is bounded by its size, streamed or not, with or without line breaks (the
    bounds made small here so that reaching them is quick)."""
    assert MAX_REPLY_BYTES <= 64 << 20
    monkeypatch.setattr(client_module, "MAX_REPLY_BYTES", 2 << 20)
    monkeypatch.setattr(client_module, "MAX_LINE_BYTES", 1 << 20)
    client = VllmClient("target", server.url, timeout_s=120)
    for piece, reading, message in [
        (b"data: {}\n\n" * 10_000, lambda: list(client.post_sse("/v1/completions", {})), "MiB in its reply"),
        (b"x" * 100_000, lambda: list(client.post_sse("/v1/completions", {})), "a line longer than"),
        (b"[" * 100_000, lambda: client.get_json("/v1/models"), "MiB in its reply"),
    ]:
        server.answer = endless(piece, 0.0)
        with pytest.raises(VllmError, match=message):
            reading()
    client.close()


def test_a_native_stream_without_end_ends_the_run_in_bounded_time_and_memory(tiny: TinyModels) -> None:
    """The whole command: a speculating server that streams tokens forever holds `--timeout 3` for
    about 3 s, in bounded memory, and ends in one line with exit status 2."""
    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2)
    server.fault = Fault("endless", delay_s=0.02)
    try:
        argv = ["run", "--backend", "vllm", "--vllm-native", "--target-url", server.url, "--timeout", "3"]
        argv += ["--prompt", "def f(x):", "--raw", "--max-tokens", "20"]
        started = time.monotonic()
        done, peak_mib = run_with_peak_mib([sys.executable, "-m", "specplay", *argv], timeout_s=60)
        took = time.monotonic() - started
    finally:
        server.close()
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "took longer than --timeout 3 s" in done.stderr, done.stderr
    # Above 10 MiB: a reading came back (no Python process runs in less), not a default of 0.
    assert took < 60 and 10 < peak_mib < 2048, peak_mib


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("location", ["http://elsewhere.example:9/v1/models", "/v1/other", ""])
def test_a_redirect_is_named_and_not_followed(server: LoggingServer, status: int, location: str) -> None:
    """Said as a redirect, with where to; never followed (the key would go along)."""
    elsewhere = LoggingServer()
    try:
        target = location or elsewhere.url + "/v1/models"
        server.answer = redirect(status, target)
        client = VllmClient("target", server.url, api_key=KEY)
        with pytest.raises(VllmError) as caught:
            client.get_json("/version")
        client.close()
        line = error_line(caught.value)
        assert f"redirected /version (HTTP {status}) to {target}" in line and "not JSON" not in line
        assert KEY not in line and not elsewhere.requests and len(server.requests) == 1
    finally:
        elsewhere.close()


def test_a_3xx_without_an_address_is_still_a_redirect(server: LoggingServer) -> None:
    server.answer = redirect(300, "")
    client = VllmClient("target", server.url)
    with pytest.raises(VllmError, match=r"redirected /version \(HTTP 300\) to no address"):
        client.get_json("/version")
    client.close()


def test_a_redirect_to_a_login_shows_no_password(server: LoggingServer) -> None:
    server.answer = redirect(302, "http://me:s3cret@elsewhere.example/login")
    client = VllmClient("target", server.url)
    with pytest.raises(VllmError) as caught:
        client.get_json("/version")
    client.close()
    assert "s3cret" not in str(caught.value) and "http://***@elsewhere.example/login" in str(caught.value)


@pytest.mark.parametrize("bad", ["\r", "\n", "\x00", "é", "\u2028"])
def test_the_http_library_never_shows_a_key_it_refuses(server: LoggingServer, bad: str) -> None:
    """Below the configuration's check (tests/cli/test_api_key.py): a client given a key that is
    no header value fails in one line without it, whatever the HTTP library's own error says."""
    with pytest.raises(VllmError) as caught:
        client = VllmClient("target", server.url, api_key=KEY + bad, retries=0)
        try:
            client.get_json("/version")
        finally:
            client.close()
    assert KEY not in str(caught.value) and "s3cret" not in str(caught.value)
    assert not server.seen(KEY)


def _models_reply(length: object) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        body = json.dumps({"data": [{"id": "m", "max_model_len": length}]}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.mark.parametrize(
    "length, says",
    [
        (0, "lists max_model_len 0: a model that takes no tokens"),
        (-4, "lists max_model_len -4: a model that takes no tokens"),
        ("4096", "lists max_model_len '4096', not a whole number"),
        (2.5, "lists max_model_len 2.5, not a whole number"),
    ],
)
def test_a_max_model_len_no_model_has_is_named_as_it_is(server: LoggingServer, length: object, says: str) -> None:
    server.answer = _models_reply(length)
    client = VllmClient("target", server.url, timeout_s=10)
    with pytest.raises(VllmError) as caught:
        served_model(client)
    client.close()
    line = error_line(caught.value)
    assert says in line and "is it a vLLM server?" in line and "\n" not in line
