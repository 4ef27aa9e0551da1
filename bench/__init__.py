"""DataParallel vs DistributedDataParallel benchmarking suite. Entry point: `python -m bench` (see bench/cli.py)."""
__version__ = "0.1.0"
