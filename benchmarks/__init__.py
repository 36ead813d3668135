"""specplay's benchmarks. Packages run from the repository root as `python -m benchmarks.NAME`; the
single-file ones as `python benchmarks/NAME.py`."""
