"""Numbers derived from stored measurements: every statistic (stats) and comparing two sweeps with processes as the
samples (compare)."""
