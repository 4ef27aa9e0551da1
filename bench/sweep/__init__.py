"""The sweep process: the plan of configurations (plan), running them in turn into the store (run), launching and
supervising one configuration's processes (launch, slurm), naming why one failed (diagnose) and the correctness
gate's comparison (equivalence). Nothing here runs inside a rank."""
