"""Linux: make MLX's CPU build use OpenBLAS.

The `mlx[cpu]` wheel links the netlib reference BLAS, several times slower than OpenBLAS for the
multi-token forward passes that verification runs. Loading an OpenBLAS with RTLD_GLOBAL before
`mlx.core` is first imported makes libmlx's cblas calls bind to it, so this module is imported
before anything imports mlx. The system's OpenBLAS is used (Debian and Ubuntu:
libopenblas0-pthread): it picks kernels for the CPU at run time, where a prebuilt wheel may use
instructions the CPU lacks and crash the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

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


def _candidates() -> list[str]:
    found = [p for p in _KNOWN_PATHS if os.path.exists(p)]
    name = ctypes.util.find_library("openblas")
    return found + ([name] if name else [])


def preload_openblas() -> str | None:
    global OPENBLAS_PATH
    if sys.platform != "linux" or OPENBLAS_PATH or "mlx.core" in sys.modules:
        return OPENBLAS_PATH
    for path in _candidates():
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        OPENBLAS_PATH = path
        break
    return OPENBLAS_PATH


def slow_blas_warning() -> str | None:
    """A one-line warning when MLX runs on Linux with the reference BLAS."""
    if sys.platform == "linux" and OPENBLAS_PATH is None:
        return f"MLX is using the slow reference BLAS; {INSTALL_HINT} for faster verification"
    return None


preload_openblas()
