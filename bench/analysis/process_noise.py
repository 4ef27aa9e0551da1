"""The process noise a sweep's verdicts fall back on where a configuration ran one process, per workload and precision
(`noise`, read by bench.analysis.results.load into Sweep.noise_by_workload and each Config's noise_fallback), and the
sweep's figure per precision for its device (`by_precision`). The ladder is docs/verdicts.md's; the figures and their
words are bench.stats.noise's."""
from __future__ import annotations

from dataclasses import replace

from bench import stats
from bench.analysis import noise_source
from bench.stats.noise import WORKLOAD_WORDS, not_carried
from bench.store import hostnoise


def noise(configs: list, envs: list, earlier=None) -> dict:
    """(workload, precision) -> the process noise this sweep's comparisons of that workload at that precision fall back
    on where a configuration ran one process, the first of: this sweep's spread between the processes of that
    workload's configurations it repeated on its device at that precision; the same store's most recent earlier
    sweep's figure for that workload and precision on this host and device (`earlier`: (workload, precision, device
    type) -> Noise or None, bench.analysis.noise_source.earlier); selfcheck's figure for that host, device and precision
    (bench.store.hostnoise) where it was measured on that workload; then another workload's, this sweep's before
    selfcheck's, named with its workload ('this sweep on the synthetic MLP'); else not measured (`not_carried` names the
    figures of that workload's other precisions that do not speak for it). Never another device's or precision's: one
    H200's fp32 DeepLabV3 processes ran 0.6% apart, two of its bf16 ones 38%; and its compile sweep was held against
    selfcheck's MLP figure while the store's sweep two minutes earlier had measured DeepLabV3 bf16's own. Keyed on the
    workload too: the default CUDA sweep repeats the synthetic MLP alone, and every DeepLabV3 verdict read "0.5%, this
    sweep's spread between the 3 processes of single device x1", the MLP's 3 ms steps, as if DeepLabV3's own."""
    if not configs:
        return {}
    device = configs[0].device_type
    env = envs[0] if envs else {}
    entries = hostnoise.by_precision(env.get("hostname"), device, noise_source.device_name(env, device))
    host = {p: (e.get("workload"), stats.host_noise(e)) for p, e in entries.items()}
    mine = [c for c in configs if c.device_type == device]
    workloads = sorted({c.workload for c in mine})

    def own(w: str, p: str, named: bool = False):
        return _own(mine, w, p, named)

    def stand_in(w: str, p: str):   # another workload's figure, this sweep's first, named with its workload
        theirs = [n for n in (own(o, p, True) for o in workloads if o != w) if n is not None]
        n = max(theirs, key=lambda n: n.fraction) if theirs else (host[p][1] if p in host else None)
        return n and replace(n, detail=f"{n.detail}; {w} ran no configuration at {p} in several processes")

    found: dict = {}
    for w in workloads:
        for p in sorted({c.precision for c in mine if c.workload == w}):
            found[(w, p)] = (own(w, p) or (earlier(w, p, device) if earlier else None)
                             or (host[p][1] if host.get(p, ("",))[0] == w else None) or stand_in(w, p))
    out = {}
    for (w, p), n in found.items():
        measured = {q: m for q, m in [*((q, m) for q, (_, m) in host.items()),
                                      *((q, m) for (o, q), m in found.items() if o == w)] if m is not None}
        out[(w, p)] = n if n is not None else not_carried(p, measured)
    return out


def by_precision(by: dict, configs: list) -> dict:
    """precision -> the sweep's figure for its device (`Sweep.noise_by_precision`: Sweep.noise, the sweep's closing
    line): its one workload's (`noise`'s `by`); with several, the largest spread the sweep measured itself at that
    precision, named with its workload (a label names none), else its first workload's figure."""
    workloads = sorted({w for w, _ in by})
    out = {}
    for p in sorted({p for _, p in by}):
        own = [n for n in (_own(configs, w, p, True) for w in workloads) if n is not None] if len(workloads) > 1 else []
        out[p] = max(own, key=lambda n: n.fraction) if own else next(n for (w, q), n in sorted(by.items()) if q == p)
    return out


def _own(configs: list, w: str, p: str, named: bool = False):
    """This sweep's spread between the processes of workload w's configurations at precision p (stats.sweep_noise),
    named with the workload where `named`; None where none of them ran in several processes."""
    return stats.sweep_noise([(c.label, c.process_sps, c.process_unstable) for c in configs
                              if c.workload == w and c.precision == p], configs[0].device_type if configs else "",
                             WORKLOAD_WORDS.get(w, w) if named else "")
