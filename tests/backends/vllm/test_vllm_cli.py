"""`specplay run --backend vllm`, `specplay vllm-launch`, and their one-line errors."""

from __future__ import annotations

import json

import pytest

from specplay.cli import main
from specplay.cli.shown import shown_command
from specplay.ui.protocols import RunState
from tests.support.checks import every
from tests.support.fake_vllm import FakeVllm, Fault
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_through_vllm_matches_mlx(
    tiny: TinyModels, servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    target, near = servers
    common = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "12", "--json", "--ignore-eos"]
    code, out, _ = cli(capsys, "run", "--target", str(tiny.target), "--draft", f"near={tiny.near}", *common)
    assert code == 0
    expected = json.loads(out)["token_ids"]
    monkeypatch.setenv("SPECPLAY_API_KEY", "not-needed-here")
    urls = ["--backend", "vllm", "--target-url", f"{target.url}/v1", "--draft-url", f"near={near.url}"]
    code, out, err = cli(capsys, "run", *urls, *common)
    assert code == 0, err
    result = json.loads(out)
    assert result["token_ids"] == expected
    assert result["vllm"]["verify_strategies"] == {"prompt-logprobs": result["metrics"]["num_spec_steps"]}
    assert result["vllm"]["approximate"] is False
    assert target.headers[-1]["Authorization"] == "Bearer not-needed-here"


def test_each_sample_reports_its_own_account_however_many(
    servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every sample's generation keeps its own counters (in its DoneEvent's metrics): a sampled run
    through top-K logprobs stays approximate at the tenth sample as at the first, and each counts
    only its own verify calls."""
    target, near = servers
    urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "4", "--ignore-eos", "--temperature", "1"]
    code, out, err = cli(capsys, "run", *urls, *args, "--samples", "12", "--json")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert len(results) == 12 and every(r["vllm"]["approximate"] is True for r in results)
    for result in results:
        assert sum(result["vllm"]["verify_strategies"].values()) == result["metrics"]["num_spec_steps"]


def test_a_vllm_session_replays_through_the_same_servers(
    tiny: TinyModels, servers: tuple[FakeVllm, FakeVllm], tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    target, near = servers
    urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    urls += ["--draft", f"local={tiny.near}", "--vllm-strategy", "prefixes"]  # mixed: one local drafter
    common = ["--sessions-dir", str(tmp_path), "--json"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "8", "--temperature", "0.7", "--route", "local"]
    code, out, err = cli(capsys, "run", *urls, *args, "--save", "--no-baseline", *common)
    assert code == 0, err
    first = json.loads(out)
    code, out, err = cli(capsys, "run", "--replay", first["session"], *common)
    assert code == 0, err
    again = json.loads(out)
    assert again["token_ids"] == first["token_ids"] and again["settings"] == first["settings"]
    assert again["vllm"]["verify_strategies"] == {"prefixes": again["metrics"]["num_spec_steps"]}
    code, out, err = cli(capsys, "run", "--replay", first["session"], "--route", "near", *common)
    assert code == 0, err
    assert json.loads(out)["route"] == "near"
    code, out, err = cli(capsys, "export", first["session"], "--format", "md")
    assert code == 0 and "backend vllm (inspection mode)" in out, err


def test_session_is_kept_when_the_server_dies(tiny: TinyModels, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    target, near = FakeVllm(tiny.target, "target"), FakeVllm(tiny.near, "near")
    try:
        target.fault = Fault("die", after=8)  # connect probes, then a few rounds
        urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
        args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "40", "--save", "--sessions-dir", str(tmp_path)]
        code, _, err = cli(capsys, "run", *urls, *args, "--api-key", "top-secret")
        assert code == 2
        assert len(err.strip().splitlines()) == 1 and "vLLM server 'target'" in err
        (session,) = tmp_path.glob("*.jsonl")
        text = session.read_text()
        assert '"round"' in text and "top-secret" not in text
        assert json.loads(text.splitlines()[0])["backend"]["backend"] == "vllm"
    finally:
        near.close()
        target.thread.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "vllm"], "--target-url is required"),
        (["--backend", "vllm", "--target-url", "gpu:8000"], "http://"),
        (["--target", "x", "--draft-url", "http://gpu:8001"], "add --backend vllm"),
        (["--backend", "vllm", "--target", "x", "--target-url", "http://gpu:8000"], "--target-url"),
        (["--backend", "vllm", "--target-url", "http://127.0.0.1:9", "--timeout", "1"], "cannot be reached"),
    ],
)
def test_bad_backend_flags_get_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", *args, "--prompt", "hi", "--mode", "target")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err


def test_native_run_json_and_save(tiny: TinyModels, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from specplay.backends.vllm.native import recolour
    from specplay.store import load_session

    server = FakeVllm(tiny.target, "target", native_draft=tiny.near, native_k=2)
    saving = ["--sessions-dir", str(tmp_path)]
    try:
        args = ["run", "--backend", "vllm", "--vllm-native", "--target-url", server.url + "/v1"]
        code, out, err = cli(capsys, *args, "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "10", "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["vllm"]["sources_exact"] and len(result["sources"]) == len(result["token_ids"]) == 10
        speculative_decoding = result["vllm"]["speculative_decoding"]
        assert result["sources"] == recolour(
            10, speculative_decoding["per_step_accepted"], speculative_decoding["per_step_drafted"]
        )
        code, out, err = cli(capsys, *args, "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "6", "--save", *saving)
        assert code == 0 and "colours exact" in out, err
        session = load_session(next(tmp_path.glob("*.jsonl")))
        assert session.complete and len(session.main.sources) == 6 and session.header["backend"]["mode"] == "native"
        # a second speculating server (another drafter, another k) to route to, and the replay of it
        other = FakeVllm(tiny.target, "target", native_draft=tiny.far, native_k=3)
        try:
            named = ["run", "--backend", "vllm", "--vllm-native", "--target-url", f"near={server.url}"]
            routed = [*named, "--draft-url", f"far={other.url}", "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "5"]
            code, out, err = cli(capsys, *routed, "--route", "far", "--json", "--save", *saving)
            assert code == 0, err
            result = json.loads(out)
            assert result["route"] == "far" and result["vllm"]["k"] == 3 and result["settings"]["k"] == 3
            code, out, err = cli(capsys, "run", "--replay", result["session"], "--json", *saving)
            assert code == 0, err
            assert json.loads(out)["token_ids"] == result["token_ids"] and json.loads(out)["route"] == "far"
            code, out, err = cli(capsys, "run", "--replay", result["session"], "--route", "near", "--json", *saving)
            assert code == 0 and json.loads(out)["route"] == "near" and json.loads(out)["vllm"]["k"] == 2, err
        finally:
            other.close()
        code, out, err = cli(capsys, *args, "--prompt", CODE_PROMPT, "--raw", "--max-tokens", "10", "--tv", "0.5")
        assert code == 2 and "fixed by the server" in err
    finally:
        server.close()


def test_vllm_launch_prints_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "vllm-launch", "--target", "org/big", "--draft", "small=org/small", "--api-key", "k3y")
    assert code == 0
    lines = out.splitlines()
    serve = [line for line in lines if line.startswith("vllm serve")]
    assert len(serve) == 2 and "--max-logprobs 20" in serve[0] and "--enable-prompt-tokens-details" in serve[0]
    assert "--logprobs-mode processed_logprobs" in serve[1] and "--port 8001" in serve[1]
    assert "k3y" not in out
    assert any(line.startswith("specplay run --backend vllm") for line in lines)
    code, out, _ = cli(capsys, "vllm-launch", "--target", "org/big", "--draft", "org/small", "--native", "--k", "3")
    assert "--speculative-config" in out and '"num_speculative_tokens": 3' in out
    assert "--per-request-spec-decode-metrics detailed" in out
    # native with two drafters: a speculating copy of the target per drafter, and the plain baseline
    drafters = ["--draft", "code=org/code", "--draft", "prose=org/prose"]
    code, out, _ = cli(capsys, "vllm-launch", "--target", "org/big", *drafters, "--native", "--baseline")
    serve = [line for line in out.splitlines() if line.startswith("vllm serve org/big")]
    assert len(serve) == 3 and every("--gpu-memory-utilization 0.30" in line for line in serve)
    assert '"model": "org/code"' in serve[0] and '"model": "org/prose"' in serve[1] and "--speculative" not in serve[2]
    laptop = out.splitlines()[-1]
    assert laptop.startswith("specplay tui --backend vllm --vllm-native --target-url code=http://GPU-BOX:8000/v1")
    assert "--draft-url prose=http://GPU-BOX:8001/v1" in laptop and "--baseline-url http://GPU-BOX:8002/v1" in laptop


async def test_playground_drives_vllm_and_shows_a_dying_server(tiny: TinyModels, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specplay.engine.events import DoneEvent
    from specplay.engine.settings import SamplingParams, SpecSettings
    from specplay.ui.widgets.inspector import Inspector
    from specplay.ui.widgets.lane_view import LaneView
    from specplay.ui.widgets.stats_view import StatsText
    from tests.support.ui_helpers import app_for, server_config, wait_for

    target, near = FakeVllm(tiny.target, "target"), FakeVllm(tiny.near, "near")
    try:
        settings = SpecSettings(k=3, sampling=SamplingParams(temperature=0.8))
        request = {"prompt": CODE_PROMPT, "max_tokens": 10, "raw": True, "ignore_eos": True}
        app = app_for(server_config(target.url, {"near": near.url}, tmp_path, settings, **request), autorun=True)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_for(pilot, lambda: app.playground.state == RunState.RUNNING, "the autorun to start")
            await wait_for(pilot, lambda: app.playground.state == RunState.READY, "the run to finish")
            assert every(isinstance(app.playground.events[lane][-1], DoneEvent) for lane in ("speculative", "target"))
            # Wall time through HTTP is not speculative speed: the lane says so, and what it knows.
            stats = str(app.query_one("#speculative", LaneView).query_one(StatsText).stats)  # unwrapped
            assert "tokens per target call" in stats and "× modelled" in stats and "measured" not in stats
            assert "approximate (top-K of p_target only): error ≤" in stats and "TV per token" in stats
            lane = app.query_one("#speculative", LaneView)
            drafted = next(pick for pick in lane.picks if pick.token.source != "bonus")  # judged at a position
            lane.select(drafted.index)
            await wait_for(pilot, lambda: app.query_one(Inspector).pick is not None, "a token to be picked")
            assert "TV in [" in str(app.query_one(Inspector).render())
            target.fault = Fault("die", after=target.num_completions)
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: "run failed" in app.playground.status, "the dead server to be reported")
            assert "vLLM server 'target'" in app.playground.status
    finally:
        near.close()
        target.thread.close()


def test_bench_sweeps_through_vllm(
    servers: tuple[FakeVllm, FakeVllm], tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    target, near = servers
    out = tmp_path / "bench"
    urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    code, _, err = cli(capsys, "bench", *urls, "--quick", "--max-tokens", "2", "--out", str(out))
    assert code == 0, err
    report = json.loads((out / "results.json").read_text())
    assert report["about"]["backend"] == "vllm"
    rows = {row["config"]: row for row in report["rows"] if row["category"] == "code"}
    assert rows["k=2"]["mean_acceptance_length"] >= 1
    assert rows["k=2"]["speedup"] is None and rows["draft-only near"]["speedup"] is not None  # HTTP is not speed
    assert "times HTTP round trips" in (out / "report.md").read_text()
    code, _, err = cli(capsys, "bench", *urls, "--quick", "--compare-mlx-lm", "--out", str(out))
    assert code == 2 and "--compare-mlx-lm needs local MLX models" in err


def test_fidelity_through_vllm_scores_as_the_target_does(
    servers: tuple[FakeVllm, FakeVllm], backend, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    from specplay.backends.vllm import connect_vllm_backend

    target, near = servers
    vllm = connect_vllm_backend(target.url)
    prompt, generated = backend.encode(CODE_PROMPT, raw=True), [5, 17, 300, 2, 41]
    assert vllm.score(prompt, generated) == pytest.approx(backend.score(prompt, generated), abs=1e-4)
    assert vllm.score(prompt, []) == []
    vllm.close()

    urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--samples", "2", "--max-tokens", "4", "--budgets", "0,1"]
    code, out, err = cli(capsys, "fidelity", *urls, *args, "--sessions-dir", str(tmp_path))
    assert code == 0, err
    assert "D=1" in out and "not shown, it would time HTTP round trips" in out
    report = json.loads(next(tmp_path.glob("fidelity_*.json")).read_text())
    assert report["backend"]["backend"] == "vllm" and report["route"] == "near"
    rows = {row["label"]: row for row in report["rows"]}
    assert rows["D=1"]["draft_acceptance_rate"] == 1.0  # D = 1 accepts every draft token
    assert every(row["log_likelihood_per_token"] < 0 for row in rows.values())


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://127.0.0.1:abc", "--target-url has a port that is not a number from 1 to 65535"),
        ("http://127.0.0.1:70000/v1", "--target-url has a port that is not a number from 1 to 65535"),
        ("http://:8000", "--target-url takes an http:// or https:// address"),
        ("ftp://gpu:8000", "--target-url takes an http:// or https:// address"),
        ("http://me:s3cret@gpu:abc", "(got 'http://***@gpu:abc')"),
        ("http://me:s3/cr@et@gpu:abc", "(got 'http://***@gpu:abc')"),  # a password may hold / and @
        ("http://gpu:8000/v1?x=1", "without ?query or #fragment"),
    ],
)
def test_bad_addresses_are_one_line_without_secrets(url: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--backend", "vllm", "--target-url", url, "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "s3cret" not in err and "cr@et" not in err, err


def test_a_printed_command_hides_keys_and_logins() -> None:
    argv = ["specplay", "bench", "--api-key", "s3cret", "--api-key=s3cret", "--draft-url", "a=http://me:s3cret@gpu/v1"]
    argv += ["--target-url=http://me:s3cret@gpu", "--prompt", "see http://x@y"]
    shown = shown_command(argv, "$SPECPLAY_API_KEY")
    assert "s3cret" not in shown and "me:" not in shown
    assert shown == (
        'specplay bench --api-key "$SPECPLAY_API_KEY" --api-key="$SPECPLAY_API_KEY" '
        "--draft-url 'a=http://***@gpu/v1' "
        "'--target-url=http://***@gpu' --prompt 'see http://x@y'"  # a prompt is left as written
    )


def test_credentials_in_an_address_are_sent_never_written(
    servers: tuple[FakeVllm, FakeVllm], tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    import base64

    target, near = servers
    with_login = target.url.replace("http://", "http://me:s3cret@")
    urls = ["--backend", "vllm", "--target-url", with_login, "--draft-url", f"near={near.url}"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "4", "--json", "--save", "--sessions-dir", str(tmp_path)]
    code, out, err = cli(capsys, "run", *urls, *args)
    assert code == 0, err
    assert target.headers[-1]["Authorization"] == "Basic " + base64.b64encode(b"me:s3cret").decode()
    (session,) = tmp_path.glob("*.jsonl")
    assert "s3cret" not in session.read_text() and "s3cret" not in out + err
    assert json.loads(out)["token_ids"]


def test_a_second_ctrl_c_quits_while_a_server_is_slow_to_answer(tiny: TinyModels, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The first Ctrl-C stops the run at the end of its round, which waits on the server's reply;
    the second quits at once, the session kept as incomplete."""
    import signal
    import subprocess
    import sys
    import time

    from specplay.store import load_session

    target, near = FakeVllm(tiny.target, "target"), FakeVllm(tiny.near, "near")
    try:
        target.fault = Fault("slow", after=6, delay_s=60.0)
        urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
        args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "200", "--ignore-eos", "--save"]
        command = [sys.executable, "-m", "specplay", "run", *urls, *args, "--sessions-dir", str(tmp_path)]
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while target.num_completions <= 6:  # the slow answer has begun
            assert time.monotonic() < deadline and run.poll() is None, "the run never reached the slow answer"
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert run.poll() is None  # still waiting for the round to end
        run.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert run.wait(timeout=30) == 130 and time.monotonic() - started < 10
        err = run.stderr.read() if run.stderr else ""
        assert "Ctrl-C again quits at once" in err and "Traceback" not in err, err
        session = load_session(next(tmp_path.glob("*.jsonl")))
        assert not session.complete and session.main.token_ids
    finally:
        target.fault = None
        target.close()
        near.close()


def test_route_none_needs_no_drafter(servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str]) -> None:
    """`--route none` drafts nothing: a target server alone runs it, as target-only gives."""
    target, _ = servers
    common = ["run", "--backend", "vllm", "--target-url", target.url, "--prompt", CODE_PROMPT, "--raw"]
    common += ["--max-tokens", "6", "--ignore-eos", "--json"]
    code, out, err = cli(capsys, *common, "--mode", "target")
    assert code == 0, err
    alone = json.loads(out)["token_ids"]
    code, out, err = cli(capsys, *common, "--route", "none")
    assert code == 0, err
    result = json.loads(out)
    assert result["token_ids"] == alone and result["route"] == "none"


def test_a_chain_with_a_node_budget_runs_where_trees_cannot(
    servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--width 1 --tree 4` asks for chains of at most 4 drafts, which a vLLM target verifies;
    `--tree 4` alone asks for a tree, and the line says how to get the chain."""
    target, near = servers
    common = ["run", "--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    common += ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "8", "--ignore-eos", "--k", "6", "--json"]
    code, out, err = cli(capsys, *common, "--width", "1", "--tree", "4")
    assert code == 0, err
    assert json.loads(out)["settings"]["tree_nodes"] == 4
    code, out, err = cli(capsys, *common, "--tree", "4")
    assert code == 2 and err.count("\n") == 1
    assert "--tree 4 alone drafts a tree of width 2" in err and "--width 1 --tree 4" in err, err
