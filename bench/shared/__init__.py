"""What both sides of the process boundary use: the RunSpec handed from sweep to rank (spec), process control
(procs), progress heartbeats (heartbeat) and test-only fault injection (faults)."""
