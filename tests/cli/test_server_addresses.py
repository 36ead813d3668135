"""Server addresses as users type them, malformed ones included, and the commands vllm-launch
prints for pasting: one line per mistake, and a printed command that a shell reads back word for
word."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.backends.vllm.client import VllmClient
from specplay.cli import main
from specplay.config.urls import server_root
from specplay.errors import ConfigError
from tests.support.session_events import speculative_events, target_events, write_session

MALFORMED = [
    "http://[::1",  # an IPv6 address without its ]
    "http://[::1]x:8000",
    "http://[::1]]",
    "http://[zz]:8000",
    "http://[v1.x]",
    "http://gpu box:8000",
    "http://gpu\tbox",
    "http://gpu\x1b[2J:8000",
    "http://%zz:8000",
    "http://gpu..box",
    "http://-gpu",
    "http://ｇｐｕ:8000",
    "http://gpu:8000:9000",
    "http://gpu:+80",
    "http://gpu:٣",
    "http://gpu:99999999999999999999999",
    "http://gpu:0",
    "http://",
    "http://me:s3cret@[::1",
    "http:gpu",
    "//gpu:8000",
    "",
]


@pytest.mark.parametrize("url", MALFORMED)
@pytest.mark.parametrize("flag", ["--target-url", "--draft-url", "--baseline-url"])
def test_a_malformed_address_is_one_line(url: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--backend", "vllm", "--prompt", "x"]
    if flag == "--target-url":
        argv += ["--target-url", url]
    elif flag == "--draft-url":
        argv += ["--target-url", "http://gpu:8000", "--draft-url", f"near={url}"]
    else:
        argv += ["--vllm-native", "--target-url", "http://gpu:8000", "--baseline-url", url]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"specplay: error: {flag} "), err
    assert "Traceback" not in err and "s3cret" not in err and "\x1b" not in err


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    scheme=st.sampled_from(["http://", "https://", "HTTP://", "http:/", ""]),
    rest=st.text(st.sampled_from("gpu-box0123456789:[]@%/.?#_ \t\x00é:ｇ٣"), max_size=24),
)
def test_any_address_is_a_root_a_client_can_use_or_one_config_error(scheme: str, rest: str) -> None:
    try:
        root = server_root(scheme + rest)
    except ConfigError as error:
        assert "\n" not in str(error)
        return
    parsed = httpx.URL(root)  # what the client will connect to is what the root says
    assert parsed.scheme in ("http", "https") and parsed.host and root.startswith(f"{parsed.scheme}://")
    VllmClient("target", root).close()


def test_good_addresses_keep_their_meaning() -> None:
    assert server_root("http://GPU-box:8000/v1/") == "http://gpu-box:8000"
    assert server_root("https://me:pw@gpu.example.com/v1") == "https://gpu.example.com"
    assert server_root("http://[::1]:8000/v1") == "http://[::1]:8000"
    assert server_root(" http://10.0.0.2:65535 ") == "http://10.0.0.2:65535"
    assert server_root("http://gpu_box.local/proxy/v1") == "http://gpu_box.local/proxy"


HOSTILE_WORDS = ["$(touch pwned)", "`touch pwned`", "$HOME/model", "it's; rm -rf x", 'a"b']


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to paste into")
def test_printed_commands_paste_into_a_shell_word_for_word(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every word of every printed command comes back from a shell as written: no $-word or
    backquote expands, nothing runs; only the key's placeholder expands, to the key."""
    argv = ["vllm-launch", "--target", HOSTILE_WORDS[0], "--draft", f"d={HOSTILE_WORDS[1]}", "--api-key", "k3y"]
    argv += [f"--vllm-arg={word}" for word in HOSTILE_WORDS[2:]]
    for extra in ([], ["--native", "--baseline"]):
        assert main([*argv, *extra]) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
        assert "k3y" not in "\n".join(lines)
        for line in lines:
            env = {"PATH": "/usr/bin:/bin", "VLLM_API_KEY": "sk-a b", "SPECPLAY_API_KEY": "sk-c d"}
            script = f"words() {{ printf '%s\\0' \"$@\"; }}; words {line}"
            done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, check=True)
            words = done.stdout.decode().split("\0")[:-1]
            assert not list(tmp_path.iterdir()), f"pasting ran something: {line}"
            expected_key = "sk-a b" if words[0] == "vllm" else "sk-c d"
            assert words[words.index("--api-key") + 1] == expected_key
            if words[0] == "vllm":  # the model as given, and each extra argument as its own word
                assert words[2] in HOSTILE_WORDS[:2] and all(word in words for word in HOSTILE_WORDS[2:])
            else:
                assert words[:2] == ["specplay", "run" if not extra else "tui"]


@pytest.mark.parametrize("url", ["http://[::1", "http://gpu:99999", "http://a b", 8000, None])
def test_a_session_naming_a_malformed_address_is_one_line(
    url: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Addresses a session file holds are read by the same check as the flags'."""
    backend = {"backend": "vllm", "mode": "inspection", "models": {"target": {"source": url}, "near": {"source": url}}}
    lanes = {"speculative": speculative_events(), "target": target_events([(10, "def")])}
    saved = write_session(tmp_path, lanes, backend=backend)
    for argv in (["run", "--replay", str(saved)], ["tui", "--open", str(saved)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("does not name its models" in err or "is corrupt" in err), err
