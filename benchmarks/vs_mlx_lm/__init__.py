"""specplay against mlx-lm on the same models: in one process (one_process.py), each side in a
process of its own (processes.py, worker.py), OpenBLAS thread counts (blas_threads.py) and
where a round's time goes (profile_round.py). Run `python -m benchmarks.vs_mlx_lm --help`."""
