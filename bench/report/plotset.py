"""Every plot of one workload saved at once (the report's per-workload figures), from the modules that draw them."""
from __future__ import annotations

import os
from typing import Optional

from bench.report.phasesplot import phases_figure
from bench.report.plots import efficiency_figure, file_name, memory_figure, step_times_figure, throughput_figure
from bench.report.trainplot import time_to_train_figure, train_spans


def render_workload(workload: str, configs: list, where: str, plots_dir: str,
                    train: Optional[tuple] = None, reference: Optional[tuple] = None) -> dict:
    """Save every plot of one workload; returns {question: path}. train: (bars, how) or None."""
    os.makedirs(plots_dir, exist_ok=True)
    figs = {"throughput": throughput_figure(configs, workload, where),
            "efficiency": efficiency_figure(configs, workload, where)}
    if train is not None:
        figs["time_to_train"] = time_to_train_figure(train[0], train[1], workload, where, reference,
                                                     compiled=any(c.compiled for c in configs),
                                                     spans=train_spans(configs))
    figs["phases"] = phases_figure(configs, workload, where)
    figs["memory"] = memory_figure(configs, workload, where)
    figs["step_times"] = step_times_figure(configs, workload, where)
    out = {}
    for name, fig in figs.items():
        out[name] = os.path.join(plots_dir, file_name(workload, name))
        fig.savefig(out[name], dpi=100)
    return out
