"""torchrun, exactly (torch.distributed.run.main: same flags, rendezvous, agent, error reports), ended without the
interpreter's module teardown once its worker group has finished: with torch loaded that teardown took ~1.1 s
of every multi-process configuration here (2.2-3.0 s for a one-rank no-op under the stock entry point, 1.4-1.5 s
under this one). A failed worker group raises out of main() as under torchrun itself (its Root Cause report,
exit status 1).

    python -m bench.sweep.torchrun --nnodes 1 --nproc-per-node 2 ... -m bench.rank.worker SPEC
"""
from torch.distributed.run import main

from bench.shared.procs import exit_without_teardown

if __name__ == "__main__":
    main()
    exit_without_teardown(0)
