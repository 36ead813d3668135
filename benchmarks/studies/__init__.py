"""Studies: the runs behind the measurements in benchmarks/RESULTS.md that read texts, not speeds."""
