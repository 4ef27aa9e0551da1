"""Numbers derived from stored measurements: every statistic (stats), a sweep read back with every number derived from
its raw rows (results), comparing two sweeps with processes as the samples (compare), a configuration's history
over sweeps (history) and what a run costs (cost)."""
