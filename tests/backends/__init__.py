"""These tests run MLX models. Importing specplay's MLX backend here, before any test module of
the package imports mlx.core itself, loads OpenBLAS first (specplay/backends/mlx/blas.py): a
module run alone then computes as it does in the whole suite, without the slow-BLAS warning."""

import specplay.backends.mlx  # noqa: F401
