"""What runs inside one rank (process) of a configuration: the worker, the training loop and its clocks, memory,
numerics, the strategies (single, DataParallel, DDP, FSDP) and the collective microbenchmark. Nothing here imports
the sweep, the commands or the report."""
