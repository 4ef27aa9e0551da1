"""What both sides of the process boundary use: the RunSpec handed from sweep to rank (spec), process control
(procs), progress heartbeats (heartbeat), test-only fault injection (faults) and the test-only rehearsal of several ranks
on one GPU over gloo (rehearsal)."""
