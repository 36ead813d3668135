"""specplay against real vLLM servers: vLLM's CPU build serving the tiny `served` models on
loopback (tests/support/real_vllm.py). The same weights run through the MLX backend, so every answer has a
local reference; where vLLM differs from what the fake assumed, the same request is put to both.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from specplay.backends.vllm import connect_vllm_backend
from specplay.backends.vllm.report import inspection_report
from specplay.cli import main
from specplay.store import load_session
from tests.support.checks import every
from tests.support.engine_runs import done, rounds, run
from tests.support.fake_vllm import FakeVllm
from tests.support.prompts import CODE_PROMPT
from tests.support.real_vllm import RealServers
from tests.support.tiny_models import TinyModels

# One worker runs them all when the suite runs on several (--dist loadgroup): one set of servers.
pytestmark = [pytest.mark.real_vllm, pytest.mark.xdist_group("real_vllm")]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _mlx(tiny: TinyModels, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = cli(capsys, "run", "--target", str(tiny.served), "--draft", f"near={tiny.served_near}", *args)
    assert code == 0, err
    return json.loads(out)


GREEDY = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "24", "--ignore-eos", "--temperature", "0", "--json"]


@pytest.mark.parametrize("strategy", ["prompt-logprobs", "prefixes"])
def test_inspection_mode_is_the_mlx_backends_greedy_output(
    tiny: TinyModels, real_vllm: RealServers, capsys: pytest.CaptureFixture[str], strategy: str
) -> None:
    expected = _mlx(tiny, capsys, *GREEDY)
    urls = ["--backend", "vllm", "--target-url", real_vllm.target.url, "--draft-url", f"near={real_vllm.near.url}"]
    code, out, err = cli(capsys, "run", *urls, "--vllm-strategy", strategy, *GREEDY)
    assert code == 0, err
    result = json.loads(out)
    assert result["token_ids"] == expected["token_ids"]
    assert result["vllm"]["verify_strategies"] == {strategy: result["metrics"]["num_spec_steps"]}
    # the drafter is a noisy copy: it is right often, not always, as the local run says
    assert result["metrics"]["num_accepted_draft_tokens"] == expected["metrics"]["num_accepted_draft_tokens"]


def test_costs_through_vllm_measure_the_acceptance_mlx_measures(
    tiny: TinyModels, real_vllm: RealServers, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specplay costs`: the same weights greedy through vLLM and MLX accept the same drafts at each
    position; only vLLM's times hold HTTP round trips."""
    quick = ["--prompt", CODE_PROMPT, "--raw", "--repeats", "1", "--max-rows", "5", "--k-max", "4"]
    quick += ["--acceptance-tokens", "16", "--json"]
    code, out, err = cli(capsys, "costs", "--target", str(tiny.served), "--draft", f"near={tiny.served_near}", *quick)
    assert code == 0, err
    local = json.loads(out)
    urls = ["--backend", "vllm", "--target-url", real_vllm.target.url, "--draft-url", f"near={real_vllm.near.url}"]
    code, out, err = cli(capsys, "costs", *urls, *quick)
    assert code == 0, err
    remote = json.loads(out)
    assert (local["includes_http"], remote["includes_http"]) == (False, True)
    assert [row["rows"] for row in remote["verify_ms"]] == [1, 2, 3, 4, 5]
    accepted = [r["drafters"]["near"]["acceptance_per_position"] for r in (local, remote)]
    assert accepted[0] == pytest.approx(accepted[1])
    assert 1 <= remote["drafters"]["near"]["best_k"] <= 4


def test_mixed_mode_a_local_drafter_against_a_vllm_target(
    tiny: TinyModels, real_vllm: RealServers, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _mlx(tiny, capsys, *GREEDY)
    args = ["--backend", "vllm", "--target-url", real_vllm.target.url, "--draft", f"local={tiny.served_near}"]
    code, out, err = cli(capsys, "run", *args, "--route", "local", *GREEDY)
    assert code == 0, err
    assert json.loads(out)["token_ids"] == expected["token_ids"]


def test_native_mode_is_recoloured_from_the_servers_per_step_arrays(
    tiny: TinyModels, real_vllm: RealServers, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _mlx(tiny, capsys, *GREEDY)
    args = ["--backend", "vllm", "--vllm-native", "--target-url", real_vllm.native.url, *GREEDY]
    code, out, err = cli(capsys, "run", *args)
    assert code == 0, err
    result = json.loads(out)
    assert result["token_ids"] == expected["token_ids"]  # greedy: vLLM's speculation is lossless too
    server = result["metrics"]["server"]
    assert server["sources_exact"] is True and server["k"] == 2
    sources = result["sources"]
    # the prefill's token is the target's own; then each step's accepted drafts and its last token
    assert len(sources) == 24 and sources[0] == "target" and set(sources[1:]) <= {"accepted", "corrected", "bonus"}
    # the /metrics counters moved by this request's drafts, and agree with the per-step arrays
    delta = server["counters_delta"]
    assert delta["vllm:spec_decode_num_draft_tokens_total"] > 0
    assert delta["vllm:spec_decode_num_accepted_tokens_total"] == sources.count("accepted")


def test_fidelity_through_vllm(
    tiny: TinyModels, real_vllm: RealServers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = ["--backend", "vllm", "--target-url", real_vllm.target.url, "--draft-url", f"near={real_vllm.near.url}"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--samples", "2", "--max-tokens", "8", "--budgets", "0,1"]
    code, out, err = cli(capsys, "fidelity", *urls, *args, "--json", "--sessions-dir", str(tmp_path))
    assert code == 0, err
    report = json.loads(out)
    assert [r["label"] for r in report["rows"]] == ["target-only", "draft-only", "D=0", "D=1"]
    assert every(r["log_likelihood_per_token"] < 0 for r in report["rows"])
    assert Path(report["page"]).read_text(encoding="utf-8").count("<h2>seed ") == 2


def test_asking_more_logprobs_than_the_server_allows_names_the_flag(
    real_vllm: RealServers, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = ["--backend", "vllm", "--target-url", real_vllm.target.url, "--draft-url", f"near={real_vllm.near.url}"]
    code, _, err = cli(capsys, "run", *urls, "--top-logprobs", "21", *GREEDY)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--max-logprobs" in err, err


def test_a_drafter_server_killed_mid_run_leaves_a_session_and_one_line(
    tiny: TinyModels, real_vllm: RealServers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.real_vllm import VllmServer

    doomed = VllmServer(real_vllm.near.python, tiny.served_near, "doomed", tmp_path, ["--max-logprobs", "20"], core=1)
    doomed.start().wait_ready()
    sessions = tmp_path / "s"

    def kill_after_some_rounds() -> None:  # once the session holds a few rounds: mid-run, whatever the speed
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            written = list(sessions.glob("*.jsonl"))
            if written and written[0].read_text(encoding="utf-8").count('"kind": "round"') >= 3:
                break
            time.sleep(0.05)
        doomed.kill()

    killer = threading.Thread(target=kill_after_some_rounds)
    killer.start()
    try:
        urls = ["--backend", "vllm", "--target-url", real_vllm.target.url, "--draft-url", f"near={doomed.url}"]
        args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "400", "--ignore-eos", "--save"]
        code, _, err = cli(capsys, "run", *urls, *args, "--sessions-dir", str(sessions), "--timeout", "60")
    finally:
        killer.join()
        doomed.stop()
    assert code != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "near" in err
    (session,) = (tmp_path / "s").glob("*.jsonl")
    assert not load_session(session).complete


REFUSED = [
    ({"max_tokens": 2, "temperature": 0, "n": 2}, None, "n must be 1 when using greedy sampling, got 2."),
    (
        {"max_tokens": 2, "stream": True, "prompt_logprobs": 1},
        "prompt_logprobs",
        "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
    ),
    (
        {"max_tokens": 2, "logprobs": 25},
        "logprobs",
        "Requested sample logprobs of 25, which is greater than max allowed: 20 (parameter=logprobs, value=25)",
    ),
]


def _both(real_vllm: RealServers, servers: tuple[FakeVllm, FakeVllm]) -> list[str]:
    return [real_vllm.target.url, servers[0].url]


@pytest.mark.parametrize("request_body, param, message", REFUSED, ids=["greedy n=2", "stream prompt_logprobs", "k>cap"])
def test_the_fake_refuses_what_vllm_refuses(
    real_vllm: RealServers, servers: tuple[FakeVllm, FakeVllm], request_body: dict, param: str | None, message: str
) -> None:
    for url in _both(real_vllm, servers):
        reply = httpx.post(
            f"{url}/v1/completions", json={"model": "target", "prompt": [1, 2, 3]} | request_body, timeout=120
        )
        assert reply.status_code == 400, (url, reply.text)
        assert reply.json()["error"] | {"message": reply.json()["error"]["message"]} == {
            "message": message,
            "type": "BadRequestError",
            "param": param,
            "code": 400,
        }, url


def test_the_fake_answers_in_vllms_shapes(real_vllm: RealServers, servers: tuple[FakeVllm, FakeVllm]) -> None:
    body = {"model": "target", "prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0, "logprobs": 2}
    body |= {"return_tokens_as_token_ids": True, "return_token_ids": True}
    shapes = []
    for url in _both(real_vllm, servers):
        assert httpx.get(f"{url}/version", timeout=30).json() == {"version": "0.32.0"}
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
        (choice,) = reply["choices"]
        tokens = choice["logprobs"]["tokens"]
        # text_offset counts the lengths of the token_id:N strings, not of the text
        assert choice["logprobs"]["text_offset"] == [0, len(tokens[0])], url
        with httpx.stream("POST", f"{url}/v1/completions", json=body | {"stream": True}, timeout=120) as stream:
            chunks = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
        shapes.append(
            (sorted(reply), sorted(choice), [sorted(c) for c in chunks], [sorted(c["choices"][0]) for c in chunks])
        )
    assert shapes[0] == shapes[1]


# --- temperature 1: what only the top-K can say, checked against the full distributions ------------


def _full_probs(model_dir: Path, prefix: list[int]) -> np.ndarray:
    """The model's whole next-token distribution at temperature 1, from the same weights in MLX."""
    import mlx.core as mx

    model, _ = _loaded(model_dir)
    logits = model(mx.array([prefix]))[0, -1]
    return np.array(mx.softmax(logits.astype(mx.float32)))


_MODELS: dict[Path, tuple] = {}


def _loaded(model_dir: Path) -> tuple:  # type: ignore[type-arg]
    from mlx_lm import load

    if model_dir not in _MODELS:
        _MODELS[model_dir] = load(str(model_dir))
    return _MODELS[model_dir]


@pytest.mark.parametrize("exact_correction", [False, True], ids=["top-K residual", "exact corrections"])
def test_sampled_rounds_bracket_the_true_tv_and_correct_where_the_target_has_more_mass(
    tiny: TinyModels, real_vllm: RealServers, exact_correction: bool
) -> None:
    """At temperature 1 each server lists its top 20 of 512 tokens: every judged position's d must
    lie in its bracket [tv_lower, tv_distance], p_target(x) and p_draft(x) must be the models' own,
    and every correction a token where the target has more mass than the drafter."""
    vllm = connect_vllm_backend(
        real_vllm.target.url,
        remote_drafters=[("near", real_vllm.near.url)],
        timeout_s=120,
        exact_correction=exact_correction,
    )
    try:
        prompt_ids = vllm.encode(CODE_PROMPT, raw=True)
        events = run(vllm, CODE_PROMPT, max_tokens=12, temperature=1.0, seed=11, k=3)
    finally:
        vllm.close()
    generated = list(done(events).token_ids)
    judged = 0
    for r in rounds(events):
        for i, position in enumerate(r.positions):
            if position.outcome == "unreached":
                continue
            judged += 1
            prefix = [*prompt_ids, *generated[: r.token_index], *r.drafted[:i]]
            p_target, p_draft = _full_probs(tiny.served, prefix), _full_probs(tiny.served_near, prefix)
            tv = 0.5 * float(np.abs(p_target - p_draft).sum())
            assert position.tv_lower is not None and position.tv_lower - 1e-4 <= tv <= position.tv_distance + 1e-4
            assert position.p_target == pytest.approx(p_target[position.token_id], abs=1e-4)
            assert position.p_draft == pytest.approx(p_draft[position.token_id], abs=1e-4)
            assert position.error_bound is not None and 0 <= position.error_bound <= 1
            if position.outcome == "rejected":
                corrected = r.tokens[i].token_id
                assert p_target[corrected] > p_draft[corrected]
    assert judged > 0
    report = inspection_report(done(events).metrics)
    if exact_correction:
        exact = report["exact_correction"]
        rejected = sum(p.outcome == "rejected" for r in rounds(events) for p in r.positions)
        assert exact["corrections"] + exact["capped"] == rejected and exact["inexact"] == 0


def test_vllm_launch_starts_servers_that_specplay_drives(
    tiny: TinyModels, real_vllm: RealServers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vllm-launch --run` with a separate vLLM environment (--vllm-python): the printed client
    command works against what it started, and Ctrl-C stops every server."""
    import signal
    import subprocess
    import sys

    from tests.support.real_vllm import free_port, server_env

    port = free_port()
    command = [sys.executable, "-m", "specplay", "vllm-launch", "--target", str(tiny.served), "--run"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512"]
    command += [
        "--vllm-python",
        str(real_vllm.target.python),
        "--vllm-arg=--enforce-eager",
        "--vllm-arg=--dtype=float32",
    ]
    launcher = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=server_env(tmp_path, core=1)
    )
    try:
        assert launcher.stdout is not None
        # the server logs to the same stdout; the client command comes once it answers /health
        client = next((line for line in launcher.stdout if line.startswith("specplay ")), "")
        threading.Thread(target=launcher.stdout.read, daemon=True).start()  # a full pipe would stall the server
        assert client.startswith(f"specplay run --backend vllm --target-url http://127.0.0.1:{port}/v1"), client
        code, out, err = cli(capsys, "run", "--backend", "vllm", "--target-url", f"http://127.0.0.1:{port}/v1",
                             "--mode", "target", *GREEDY)  # fmt: skip
        assert code == 0, err
        expected = _mlx(tiny, capsys, "--mode", "target", *GREEDY)
        assert json.loads(out)["token_ids"] == expected["token_ids"]
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=60)
    with pytest.raises(httpx.ConnectError):  # the server went with the launcher
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


def chi2_999(dof: int) -> float:
    """The chi-square distribution's 0.999 quantile (a 1-in-1000 false alarm), by Wilson and
    Hilferty's cube-root approximation: within 2% of the exact value from 3 degrees of freedom on."""
    z = 3.0902  # the standard normal's 0.999 quantile
    return dof * (1 - 2 / (9 * dof) + z * (2 / (9 * dof)) ** 0.5) ** 3


CORRECTIONS = 400


def test_exact_corrections_from_real_server_samples_follow_the_residual(
    tiny: TinyModels, real_vllm: RealServers
) -> None:
    """Rejection from the real target server's own samples (temperature 1, n per request) draws
    the residual norm((p_target - p_draft)+) exactly. Reference: both full distributions from the
    same weights in MLX. Tolerance: Pearson's chi-square over the residual's tokens of at least 2%
    mass (the rest pooled) below its 0.999 quantile, fixed seeds, 400 corrections."""
    from specplay.backends.vllm.exact import rejection_draw

    prefix = list(range(1, 9))
    p_target, p_draft = _full_probs(tiny.served, prefix), _full_probs(tiny.served_near, prefix)
    excess = np.maximum(p_target - p_draft, 0.0)
    tv, residual = float(excess.sum()), excess / excess.sum()
    assert tv > 0.05, "pick a prefix where the two models differ"
    url = f"{real_vllm.target.url}/v1/completions"
    body = {"model": "target", "prompt": prefix, "max_tokens": 1, "temperature": 1.0, "logprobs": 1}
    body |= {"return_tokens_as_token_ids": True, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    correction = 0

    def sample(first: int, n: int) -> list[tuple[int, float]]:
        # vLLM seeds a request's n samples seed, seed + 1, ...: a batch starts where the last ended,
        # and each correction has seeds of its own (at most 64 samples: the cap)
        reply = httpx.post(url, json=body | {"n": n, "seed": 1000 * correction + first}, timeout=120).json()
        out = []
        for choice in reply["choices"]:
            logprobs = choice["logprobs"]
            token = int(logprobs["tokens"][0].removeprefix("token_id:"))
            out.append((token, float(np.exp(logprobs["token_logprobs"][0]))))
        return out

    rng = np.random.default_rng(3)
    counts = np.zeros(len(residual))
    for correction in range(CORRECTIONS):  # noqa: B007 (sample reads it)
        draw = rejection_draw(sample, lambda y: (float(p_draft[y]),) * 2, lambda ys: {}, rng, tv)
        assert draw.token is not None
        counts[draw.token] += 1
    assert counts[residual == 0].sum() == 0, "a correction where the drafter had more mass than the target"
    big = residual >= 0.02
    observed = np.append(counts[big], counts[~big].sum())
    expected = CORRECTIONS * np.append(residual[big], residual[~big].sum())
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert len(observed) >= 4 and chi2 < chi2_999(len(observed) - 1), (chi2, observed, expected)
