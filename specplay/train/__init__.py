"""Training drafters and the demo models: corpus, pre-training, distillation (DistillSpec).

Runs on the MLX backend; the engine never imports this package.
"""

# The system OpenBLAS must be loaded before mlx.core, or training runs ~15x slower on Linux CPUs.
from specplay.backends.mlx import blas  # noqa: F401
