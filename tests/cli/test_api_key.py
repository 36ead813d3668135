"""The API key, against a logging server on loopback: a key that cannot be an HTTP header is refused
in one line that never shows it, whatever its bytes; a key goes only to servers named on the
command line, never to those a session file names, and a session opened read-only contacts no
server until the user asks for a run."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.cli import build_parser, main
from specplay.cli import tui as tui_command
from specplay.config.api_key import KEY_WITHHELD
from specplay.ui.app import create_app
from specplay.ui.protocols import RunState
from tests.support.logging_server import LoggingServer
from tests.support.session_events import speculative_events, target_events, write_session
from tests.support.ui_helpers import wait_for

MARK = "sk-Zq9"
"""Every test key starts so: a message that showed any key would show this."""

NOT_HEADERS = {
    "CRLF file": MARK + "live\r",
    "line feed": MARK + "live\n",
    "NUL": MARK + "li\x00ve",
    "escape": MARK + "live\x1b[2J",
    "DEL": MARK + "live\x7f",
    "non-ASCII": MARK + "livé",
    "line separator": MARK + "live\u2028",
    "leading tab": "\t" + MARK + "live",
    "C1 control": MARK + "live\x85",
}


@pytest.fixture
def server() -> Iterator[LoggingServer]:
    made = LoggingServer()
    yield made
    made.close()


def _run(server: LoggingServer, *extra: str) -> list[str]:
    return ["run", "--backend", "vllm", "--target-url", server.url, "--mode", "target", "--prompt", "x", *extra]


@pytest.mark.parametrize("key", NOT_HEADERS.values(), ids=NOT_HEADERS.keys())
@pytest.mark.parametrize("given_as", ["environment", "flag"])
def test_a_key_that_cannot_be_a_header_is_refused_without_showing_it(
    key: str,
    given_as: str,
    server: LoggingServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if given_as == "environment":
        if "\x00" in key:
            pytest.skip("no environment variable can hold a NUL")
        monkeypatch.setenv("SPECPLAY_API_KEY", key)
        argv, source = _run(server), "$SPECPLAY_API_KEY"
    else:
        monkeypatch.delenv("SPECPLAY_API_KEY", raising=False)
        argv, source = _run(server, "--api-key", key), "--api-key"
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and f"{source} cannot be sent as an HTTP header" in err, err
    assert MARK not in out + err and "Traceback" not in err
    assert server.requests == []  # refused before anything was sent


KEY_TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(rest=KEY_TEXT)
def test_any_key_is_sent_as_it_is_or_refused_unseen(rest: str) -> None:
    """Whatever its characters: a key of visible ASCII reaches the server exactly; any other is
    refused before a request, in one line, and no line ever shows it."""
    key = MARK + rest
    server = LoggingServer()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(_run(server, "--timeout", "5", "--api-key", key))
    finally:
        server.close()
    shown = out.getvalue() + err.getvalue()
    assert code == 2 and err.getvalue().count("\n") == 1 and MARK not in shown, shown
    if all("!" <= c <= "~" for c in key):
        assert server.requests and {r.headers.get("Authorization") for r in server.requests} == {f"Bearer {key}"}
    else:
        assert server.requests == [] and "cannot be sent as an HTTP header" in shown


def _vllm_session(folder: Path, target: str, near: str) -> Path:
    backend = {
        "backend": "vllm",
        "mode": "inspection",
        "verify_strategy": "auto",
        "exact_correction": False,
        "top_logprobs": 20,
        "models": {"target": {"source": target, "path": target}, "near": {"source": near, "path": near}},
    }
    lanes = {"speculative": speculative_events(), "target": target_events([(10, "def")])}
    return write_session(folder, lanes, backend=backend)


def test_a_replayed_session_never_gets_the_key(
    server: LoggingServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared session names a host that collects keys: replaying it reaches that host without
    the key, and says so; the key goes to a server named on the command line."""
    monkeypatch.setenv("SPECPLAY_API_KEY", MARK + "live")
    saved = _vllm_session(tmp_path, server.url, server.url + "/v1")
    for argv in (["run", "--replay", str(saved)], ["run", "--replay", str(saved), "--api-key", MARK + "flag"]):
        assert main(argv) == 2  # the stand-in is no vLLM server
        err = capsys.readouterr().err
        assert server.requests, "the replay should have reached the session's server"
        assert not server.seen(MARK) and all("Authorization" not in r.headers for r in server.requests)
        assert KEY_WITHHELD in err and MARK not in err and err.count("\n") == 2, err
        server.requests.clear()
    named = ["--backend", "vllm", "--target-url", server.url, "--draft-url", f"near={server.url}"]
    assert main(["run", "--replay", str(saved), *named]) == 2
    assert server.requests[0].headers.get("Authorization") == f"Bearer {MARK}live"
    assert KEY_WITHHELD not in capsys.readouterr().err


async def test_an_opened_session_contacts_no_server_until_a_run_is_asked_for(
    server: LoggingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECPLAY_API_KEY", MARK + "live")
    saved = _vllm_session(tmp_path, server.url, server.url)
    args = build_parser().parse_args(["tui", "--open", str(saved), "--sessions-dir", str(tmp_path)])
    config, opened = tui_command.configure(args)
    app = create_app(config, tui_command.playground_options(args, config, opened))
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.playground.status.startswith("session"), "the session to show")
        await pilot.pause()  # every message the opening posted handled: nothing asked for the models
        assert server.requests == [] and app.playground.state == RunState.UNLOADED
        assert "ctrl+r connects to the servers (without the API key" in app.playground.status
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.playground.state == RunState.FAILED, "the stand-in to fail the load")
    assert server.requests and not server.seen(MARK)
    assert all("Authorization" not in r.headers for r in server.requests)


@pytest.mark.parametrize("key", NOT_HEADERS.values(), ids=NOT_HEADERS.keys())
def test_vllm_launch_refuses_a_key_no_client_could_send(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm-launch", "--target", "org/big", "--api-key", key]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "--api-key cannot be sent as an HTTP header" in err and MARK not in out + err


@pytest.mark.parametrize("args", [["--api-key", "sk-live-1234"], ["--api-key=sk-live-1234"]])
def test_a_key_given_to_a_command_that_takes_none_is_not_echoed(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["sessions", *args])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "unrecognized arguments" in err and "<hidden>" in err
    assert "sk-live-1234" not in err and err.count("\n") == 1
