"""OpenBLAS's thread count: specplay's default unless the user set one, as OpenBLAS itself reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specplay.backends.mlx import blas
from tests.support.busy import busy_cpu
from tests.support.checks import every
from tests.support.tiny_models import TinyModels

# A fresh interpreter: OpenBLAS reads its thread count once, when it loads.
PROBE = """
import ctypes, json, os
from specplay.backends.mlx import blas
threads = ctypes.CDLL(blas.OPENBLAS_PATH).openblas_get_num_threads() if blas.OPENBLAS_PATH else None
print(json.dumps({"threads": threads, "chosen": blas.THREADS_CHOSEN, "env": os.environ.get("OPENBLAS_NUM_THREADS")}))
"""

needs_openblas = pytest.mark.skipif(
    sys.platform != "linux" or blas.OPENBLAS_PATH is None, reason="OpenBLAS is preloaded on Linux only, when installed"
)


def probe(**variables: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in blas.THREAD_VARIABLES} | variables
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


FIT = """
import ctypes, json, sys
from specplay.backends.mlx import blas, load_mlx_backend
get = ctypes.CDLL(blas.OPENBLAS_PATH).openblas_get_num_threads
seen = {}
for parameters in (1_000_000, 50_000_000):
    blas.fit_threads(parameters)
    seen[parameters] = [get(), blas.THREADS_CHOSEN]
backend = load_mlx_backend(sys.argv[1])  # a tiny target: loading fits the count to it
seen["loaded"] = [get(), backend.describe()["blas_threads"]]  # as sessions record it
print(json.dumps(seen))
"""


def fitted(target: str, **variables: str) -> dict[str, list[Any]]:
    env = {k: v for k, v in os.environ.items() if k not in blas.THREAD_VARIABLES} | variables
    done = subprocess.run([sys.executable, "-c", FIT, target], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_openblas
def test_the_count_follows_the_loaded_targets_size(tiny: TinyModels) -> None:
    seen = fitted(str(tiny.target))
    assert blas.threads_for(1_000_000) == 1 and blas.threads_for(50_000_000) == blas.default_threads()
    assert seen["1000000"][0] == 1 and "too small to share its products" in seen["1000000"][1]
    # A large target gets a thread per CPU, less any that other work on this machine held meanwhile
    count, chosen = seen["50000000"]
    quiet = count == blas.default_threads() and "one per CPU" in chosen
    assert quiet or (count < blas.default_threads() and "other processes kept" in chosen)
    assert seen["loaded"][0] == 1 and "too small to share its products" in seen["loaded"][1]  # under 4M


def test_a_cpu_counts_as_taken_when_other_work_holds_more_than_half_of_it() -> None:
    cpus = blas.default_threads()
    assert blas.threads_for(50_000_000, busy_elsewhere=0.4) == cpus
    assert blas.threads_for(50_000_000, busy_elsewhere=0.6) == max(1, cpus - 1)
    assert blas.threads_for(50_000_000, busy_elsewhere=cpus + 3.0) == 1  # never none
    assert blas.threads_for(1_000_000, busy_elsewhere=0.0) == 1  # small targets: one, whatever the load


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc/stat")
def test_a_process_spinning_elsewhere_is_seen_as_one_busy_cpu() -> None:
    with busy_cpu():
        busy = blas.busy_elsewhere_cpus()
    assert 0.7 <= busy <= blas.default_threads() + 0.1, busy  # the spinner's CPU, and not this process's sleep


@needs_openblas
@pytest.mark.skipif(blas.default_threads() < 2, reason="a busy CPU can take a thread only where there are two")
def test_a_busy_cpu_takes_a_thread_from_a_large_target_and_the_line_says_why(tiny: TinyModels) -> None:
    with busy_cpu():
        seen = fitted(str(tiny.target))
    count, chosen = seen["50000000"]
    assert count <= blas.default_threads() - 1 and "other processes kept" in chosen, chosen  # more, if CI is busy too
    assert seen["1000000"][0] == 1  # a small target's count does not depend on the load


REFIT = """
import ctypes, json, subprocess, sys, time
from specplay.backends.mlx import blas
get = ctypes.CDLL(blas.OPENBLAS_PATH).openblas_get_num_threads
seen = {}
blas.refit_threads("as the run started")  # nothing fitted yet: nothing to refit
seen["unfitted"] = [get(), blas.THREADS_CHOSEN]
blas.fit_threads(50_000_000)
seen["loaded"] = [get(), blas.THREADS_CHOSEN]
spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
time.sleep(0.5)
blas.refit_threads("as the run started")
seen["busy"] = [get(), blas.THREADS_CHOSEN]
spinner.kill()
spinner.wait()
print(json.dumps(seen))
"""


@needs_openblas
@pytest.mark.skipif(blas.default_threads() < 2, reason="a busy CPU can take a thread only where there are two")
def test_a_refit_follows_load_that_started_after_the_target_loaded() -> None:
    """`refit_threads` (a playground's next run): load that began after loading takes a thread off
    the count, and the line says when it was seen."""
    env = {k: v for k, v in os.environ.items() if k not in blas.THREAD_VARIABLES}
    done = subprocess.run([sys.executable, "-c", REFIT], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["unfitted"][0] == blas.default_threads() and "specplay's default" in seen["unfitted"][1]
    count, chosen = seen["busy"]
    assert count <= blas.default_threads() - 1 and "busy as the run started" in chosen, chosen


@needs_openblas
@pytest.mark.parametrize("variable", blas.THREAD_VARIABLES)
def test_the_users_setting_wins_over_the_fitted_count(tiny: TinyModels, variable: str) -> None:
    wanted = min(2, os.cpu_count() or 1)
    seen = fitted(str(tiny.target), **{variable: str(wanted)})
    assert every(count == wanted and f"{variable}={wanted}" in chosen for count, chosen in seen.values())


@needs_openblas
def test_default_applies_when_the_user_sets_nothing() -> None:
    seen = probe()
    assert seen["threads"] == blas.default_threads()
    assert "specplay's default" in str(seen["chosen"])
    assert seen["env"] is None  # asked for while loading only: programs specplay starts keep their own


@needs_openblas
@pytest.mark.parametrize("variable", blas.THREAD_VARIABLES)
def test_the_users_setting_wins(variable: str) -> None:
    wanted = min(2, os.cpu_count() or 1)  # OpenBLAS caps its threads at the CPUs it sees
    seen = probe(**{variable: str(wanted)})
    assert seen["threads"] == wanted
    assert f"{variable}={wanted}" in str(seen["chosen"])


def test_user_threads_reads_openblas_variables_in_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in blas.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert blas.user_threads() is None
    monkeypatch.setenv("OMP_NUM_THREADS", " ")  # blank is unset, as OpenBLAS reads it
    assert blas.user_threads() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert blas.user_threads() == "OMP_NUM_THREADS=3"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert blas.user_threads() == "OPENBLAS_NUM_THREADS=2"
