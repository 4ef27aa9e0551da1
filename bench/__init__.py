"""DataParallel vs DistributedDataParallel benchmarking suite. Entry point: `python -m bench` (see bench/cli.py);
results as pandas DataFrames: `from bench import results; results.load("results/bench.sqlite")`."""
__version__ = "0.1.0"
