"""Every JSON specplay reads goes through one bounded reader: nesting deeper than it takes is one
line naming the source, never RecursionError, whichever reader meets it (a session, a prompt
file, a model config, a server's reply); and a folder of sessions with one such file still lists,
diffs and exports the others."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.backends.mlx.folder_check import check_json_files
from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.errors import VllmError
from specplay.cli import main
from specplay.data.library import read_prompts as bench_prompts
from specplay.errors import SpecplayError
from specplay.files.json_text import MAX_DEPTH, JsonError, parse_json, read_json
from specplay.store import load_session
from specplay.store.location import session_prompt
from specplay.train.prompts import read_prompts as distill_prompts
from tests.support.mutations import nested_arrays
from tests.support.session_events import (
    same_as_rounds,
    speculative_events,
    target_events,
    write_deep_session,
    write_session,
)


def nested(depth: int, kinds: str) -> str:
    """`depth` containers inside each other, arrays or objects by `kinds` (cycled), a number inside."""
    shapes = [kinds[i % len(kinds)] == "o" for i in range(depth)]
    opening = "".join('{"k": ' if is_object else "[" for is_object in shapes)
    return opening + "1" + "".join("}" if is_object else "]" for is_object in reversed(shapes))


class _Replies(BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Replies)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _session(tmp: Path, text: str) -> None:
    path = write_session(tmp, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    lines = path.read_text(encoding="utf-8").split("\n")
    path.write_text("\n".join([lines[0], '{"type": "texts", "texts": ' + text + "}", *lines[1:]]), encoding="utf-8")
    load_session(path)


def _header(tmp: Path, text: str) -> None:
    path = tmp / "header.jsonl"
    path.write_text('{"type": "header", "prompt": "p", "extra": ' + text + "}\n", encoding="utf-8")
    if session_prompt(path) is None:
        raise SpecplayError("unreadable header")  # the listing's reader says None, never raises


def _distill_jsonl(tmp: Path, text: str) -> None:
    path = tmp / "prompts.jsonl"
    path.write_text('{"prompt": "p", "extra": ' + text + "}\n", encoding="utf-8")
    distill_prompts(path)


def _bench_jsonl(tmp: Path, text: str) -> None:
    path = tmp / "bench.jsonl"
    path.write_text('{"category": "code", "text": "t", "note": ' + text + "}\n", encoding="utf-8")
    bench_prompts(path)


def _config(tmp: Path, text: str) -> None:
    path = tmp / "config.json"
    path.write_text('{"model_type": "llama", "extra": ' + text + "}", encoding="utf-8")
    read_json(path, "config.json")


def _model_folder(tmp: Path, text: str) -> None:
    (tmp / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (tmp / "tokenizer_config.json").write_text('{"extra": ' + text + "}", encoding="utf-8")
    check_json_files("model", tmp)


READERS: dict[str, Callable[[Path, str], None]] = {
    "session": _session,
    "session header": _header,
    "distill jsonl": _distill_jsonl,
    "bench jsonl": _bench_jsonl,
    "model config": _config,
    "model folder": _model_folder,
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    depth=st.one_of(st.integers(1, MAX_DEPTH + 20), st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, 5_000, 100_000])),
    kinds=st.text(alphabet="ao", min_size=1, max_size=3),
    reader=st.sampled_from(sorted(READERS)),
)
def test_every_reader_takes_json_up_to_the_depth_and_refuses_deeper_in_one_line(
    depth: int, kinds: str, reader: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("depth")
    text = nested(depth, kinds)
    total = depth + 1  # each reader's record wraps the value in an object
    try:
        READERS[reader](tmp, text)
    except RecursionError:  # pragma: no cover - the defect this test guards against
        pytest.fail(f"{reader}: RecursionError at depth {depth}")
    except SpecplayError as error:
        assert total > MAX_DEPTH, f"{reader} refused depth {depth}: {error}"
        assert "\n" not in str(error)
    else:
        assert total <= MAX_DEPTH, f"{reader} took depth {depth}"


@given(depth=st.integers(1, 3 * MAX_DEPTH), kinds=st.text(alphabet="ao", min_size=1, max_size=4))
def test_parse_json_takes_exactly_up_to_max_depth(depth: int, kinds: str) -> None:
    text = nested(depth, kinds)
    if depth <= MAX_DEPTH:
        assert parse_json(text, "x") == json.loads(text)
    else:
        with pytest.raises(JsonError, match=f"x nests JSON deeper than {MAX_DEPTH} levels"):
            parse_json(text, "x")


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, "]" * 5 + "[" * 100_000, '"' + "[" * 1000 + '"', "[" * 200 + "}" * 200, "1" * 5000],
)
def test_malformed_or_huge_text_is_one_json_error(text: str) -> None:
    try:
        parse_json(text, "the reply")
    except JsonError as error:
        assert str(error).startswith("the reply ")
    else:
        assert text.startswith('"')  # a string holding brackets is JSON


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_a_server_reply_nested_too_deep_is_one_line(depth: int, server: ThreadingHTTPServer) -> None:
    _Replies.body = nested_arrays(depth).encode()
    client = VllmClient("target", f"http://127.0.0.1:{server.server_address[1]}", retries=1)
    with pytest.raises(VllmError) as caught:
        client.get_json("/v1/models")
    assert "\n" not in str(caught.value) and "/v1/models" in str(caught.value)


def test_a_deep_session_spoils_only_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_session(tmp_path, {"speculative": speculative_events(), "target": target_events(same_as_rounds())})
    deep = write_deep_session(tmp_path)
    folder = ["--sessions-dir", str(tmp_path)]
    assert main(["sessions", *folder, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == sorted([good.stem, deep.stem])
    (broken,) = [r for r in rows if "error" in r]
    assert broken["id"] == deep.stem and f"nests JSON deeper than {MAX_DEPTH}" in broken["error"]
    assert main(["sessions", *folder]) == 0
    out = capsys.readouterr().out
    assert good.stem in out and deep.stem in out and "unreadable" in out
    for command in (
        ["diff", str(good), str(deep)],
        ["export", str(deep)],
        ["run", "--replay", str(deep)],
        ["tui", "--open", deep.stem, *folder],
    ):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and deep.name in err and "deeper than" in err, (command, err)
    assert [p.text for p in distill_prompts(tmp_path)] == ["def fib(n):"]  # distill: the others' prompts
