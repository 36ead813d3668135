"""MLX backend over mlx-lm. Importing it loads OpenBLAS first on Linux (see blas.py)."""

from specplay.backends.mlx import blas  # noqa: F401  (must precede any mlx import)
from specplay.backends.mlx.mlx_backend import MlxBackend, load_mlx_backend, release_thread

__all__ = ["MlxBackend", "load_mlx_backend", "release_thread"]
