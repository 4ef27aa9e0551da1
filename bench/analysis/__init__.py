"""Numbers derived from stored measurements: a sweep read back with every number derived from its raw rows (results),
comparing two sweeps with processes as the samples (compare), a configuration's history over sweeps (history), what a
run costs (cost), the reference experiment's times (reference), waits in collectives and profiler traces (waits,
traces), a stored sweep handed to the forecast (forecastable), achieved FLOP/s and model FLOPs utilisation
(utilisation) and what the GPU's clocks did in the window (gpustate). The statistics themselves live in bench.stats, the
forecast's model in bench.forecast."""
