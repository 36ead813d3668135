"""Linux: make MLX's CPU build use OpenBLAS.

The `mlx[cpu]` wheel links the netlib reference BLAS, several times slower than OpenBLAS for the
multi-token forward passes that verification runs. Loading an OpenBLAS with RTLD_GLOBAL before
`mlx.core` is first imported makes libmlx's cblas calls bind to it, so this module is imported
before anything imports mlx. The system's OpenBLAS is used (Debian and Ubuntu:
libopenblas0-pthread): it picks kernels for the CPU at run time, where a prebuilt wheel may use
instructions the CPU lacks and crash the process.

OpenBLAS reads its thread count from the environment once, as it loads. Unless the user has set
one, specplay asks for default_threads() while loading it (and leaves the environment as it found
it, so programs that specplay starts keep their own defaults), then, once the target is loaded,
sets the count its size and the CPUs other processes leave free call for (`fit_threads`), and
again before each of a playground's runs (`refit_threads`); THREADS_CHOSEN says what happened.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

_KNOWN_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0",
    "/usr/lib/libopenblas.so.0",
)
INSTALL_HINT = "install OpenBLAS (Debian/Ubuntu: apt-get install libopenblas0-pthread)"

OPENBLAS_PATH: str | None = None
"""The OpenBLAS in use, or None (not Linux, none installed, or mlx.core was imported first)."""

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
"""What OpenBLAS reads its thread count from, first match winning: any of them set is the user's choice."""


def default_threads() -> int:
    """OpenBLAS threads for a model large enough to share its products: one per CPU this process
    may use (a container's limit counts, not the machine's CPUs)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


SMALL_MODEL_PARAMETERS = 4_000_000
"""Below this many target parameters, one OpenBLAS thread; from it on, one per CPU.

Measured on 2-CPU VMs (README, Benchmarks): on the smallest llama target (0.94M parameters)
`specplay run` in fresh processes read 976-1,015 tokens/s with one thread against 826 with two,
whose wake-ups and spinning take CPU time from MLX's and Python's threads while its share of
products this small saves nothing; on the demo models (16M) and SmolLM2 (135M) two threads win by
a fifth or more. Where between the two the second thread starts to pay is not resolved:
benchmarks/bench_threads.py walks random targets of 0.9M to 8M parameters, and on the VM it ran
on, its A/A control spread wider than the effect.

Fewer threads also win while other work holds CPUs (`busy_elsewhere_cpus`): with one of two CPUs
kept busy by another process, the demo models ran 2.5x faster speculatively and 1.5x faster
target-only with one thread than with two, whose products wait for the thread that shares the
busy CPU (benchmarks/RESULTS.md, 2026-12-06)."""


def threads_for(target_parameters: int, busy_elsewhere: float = 0.0) -> int:
    """The OpenBLAS thread count for a target of this many parameters (SMALL_MODEL_PARAMETERS), on
    a machine where other processes keep `busy_elsewhere` CPUs' worth busy: a CPU counts as taken
    when more than half of it is, and OpenBLAS gets the rest (at least one)."""
    if target_parameters < SMALL_MODEL_PARAMETERS:
        return 1
    taken = math.floor(busy_elsewhere + 0.5)
    return max(1, default_threads() - taken)


LOOK_S = 0.2
"""How long specplay watches the CPUs before choosing a thread count: 20 scheduler ticks a CPU at
Linux's usual 100 Hz, enough to see a process that holds a whole CPU."""


def _cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) scheduler ticks so far over `cpus`, from /proc/stat; None where unreadable."""
    busy = total = 0
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                name, *fields = line.split()
                if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
                    continue
                # user nice system idle iowait irq softirq steal: guest time is inside user already
                ticks = [int(f) for f in fields[:8]]
                busy += ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]
                total += sum(ticks)
    except (OSError, ValueError):
        return None
    return (busy, total) if total else None


def busy_elsewhere_cpus(look_s: float = LOOK_S) -> float:
    """CPUs' worth of time that other processes used over the next `look_s` seconds, among the
    CPUs this process may use: their busy time less this process's own. 0 where /proc is absent."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    before, mine_before, start = _cpu_ticks(cpus), time.process_time(), time.perf_counter()
    time.sleep(look_s)
    after, mine, elapsed_s = _cpu_ticks(cpus), time.process_time() - mine_before, time.perf_counter() - start
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    busy_share = (after[0] - before[0]) / (after[1] - before[1])
    return max(0.0, busy_share * len(cpus) - mine / elapsed_s)


THREADS_CHOSEN = "not applied: no OpenBLAS loaded"
"""One line on OpenBLAS's thread count and who chose it, for benchmark headers and sessions."""
_THREADS_ARE_OURS = False
"""Whether specplay set the count (no user setting, and OpenBLAS loaded as specplay asked)."""
_FITTED_TO: int | None = None
"""The parameter count of the target the count was last fitted to (`refit_threads`)."""


def _candidates() -> list[str]:
    found = [p for p in _KNOWN_PATHS if os.path.exists(p)]
    name = ctypes.util.find_library("openblas")
    return found + ([name] if name else [])


def user_threads() -> str | None:
    """The user's thread setting for OpenBLAS, as NAME=VALUE, or None."""
    for name in THREAD_VARIABLES:
        if os.environ.get(name, "").strip():
            return f"{name}={os.environ[name]}"
    return None


@contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` (None: untouched) for the block only."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def preload_openblas() -> str | None:
    global OPENBLAS_PATH, THREADS_CHOSEN, _THREADS_ARE_OURS
    if sys.platform != "linux" or OPENBLAS_PATH or "mlx.core" in sys.modules:
        return OPENBLAS_PATH
    user = user_threads()
    default = default_threads()
    with _environment("OPENBLAS_NUM_THREADS", None if user else str(default)):
        for path in _candidates():
            try:
                library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            OPENBLAS_PATH = path
            break
    if OPENBLAS_PATH is not None:
        threads = library.openblas_get_num_threads()
        THREADS_CHOSEN = _describe_threads(threads, user, default)
        _THREADS_ARE_OURS = user is None and threads == default
    return OPENBLAS_PATH


def _describe_threads(threads: int, user: str | None, default: int) -> str:
    if user:
        return f"{threads} (the user's {user})"
    if threads == default:
        return f"{threads} (specplay's default, one per CPU; OPENBLAS_NUM_THREADS overrides it)"
    return f"{threads} (OpenBLAS's own: it was loaded before specplay asked for {default})"


def fit_threads(target_parameters: int, moment: str = "as the target loaded") -> None:
    """Give OpenBLAS the thread count a target of this size runs fastest with on the CPUs other work
    leaves free now (`moment` says when, for THREADS_CHOSEN), unless the user set one (their
    setting wins) or OpenBLAS was loaded before specplay could ask (it keeps its own)."""
    global THREADS_CHOSEN, _FITTED_TO
    if OPENBLAS_PATH is None or not _THREADS_ARE_OURS:
        return
    _FITTED_TO = target_parameters
    size = f"{target_parameters / 1e6:.1f}M"
    busy = 0.0 if target_parameters < SMALL_MODEL_PARAMETERS else busy_elsewhere_cpus()
    threads = threads_for(target_parameters, busy)
    library = ctypes.CDLL(OPENBLAS_PATH)
    library.openblas_set_num_threads(threads)
    if target_parameters < SMALL_MODEL_PARAMETERS:
        why = f"a {size}-parameter target, too small to share its products"
    elif threads < default_threads():
        why = f"other processes kept {busy:.1f} of {default_threads()} CPUs busy {moment}, a {size}-parameter target"
    else:
        why = f"one per CPU for a {size}-parameter target"
    threads = library.openblas_get_num_threads()
    THREADS_CHOSEN = f"{threads} (specplay's choice: {why}; OPENBLAS_NUM_THREADS overrides it)"


def refit_threads(moment: str) -> None:
    """`fit_threads` again for the target last fitted, to the load on the machine now: a playground
    left open keeps its models while other work starts and stops (`moment`: when, in words)."""
    if _FITTED_TO is not None:
        fit_threads(_FITTED_TO, moment)


def slow_blas_warning() -> str | None:
    """A one-line warning when MLX runs on Linux with the reference BLAS."""
    if sys.platform == "linux" and OPENBLAS_PATH is None:
        return f"MLX is using the slow reference BLAS; {INSTALL_HINT} for faster verification"
    return None


preload_openblas()
