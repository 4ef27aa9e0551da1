"""`./run_bench.sh forecast` holds a CPU budget to a node's processes summed, as the report does (bench.report.forecast
passes the processes per node to bench.forecast.memory.fit_words; the terminal did not)."""
from __future__ import annotations

from bench.commands import forecast as cmd
from test_forecast_cpu_memory import _cpu_store


def test_the_terminal_holds_a_cpu_budget_to_a_node_as_the_report_does(tmp_path, capsys):
    # the terminal held the budget to one process ('fits') where the report held it to the node's processes summed
    # ('does not fit ... per node'): DDP x2 at 700 MiB a process needs 1400 MiB of a 1 GiB node
    path = _cpu_store(tmp_path)
    assert cmd.main(["--store", path, "--to", "2,4", "--memory-budget-gib", "1"]) == 0
    out = capsys.readouterr().out
    assert "memory budget: the 1.00 GiB budget (--memory-budget-gib) per node" in out
    assert "memory: does not fit in the 1.00 GiB budget (--memory-budget-gib) per node at any count up to 4" in out, out
