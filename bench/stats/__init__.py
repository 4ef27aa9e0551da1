"""The statistics every layer above the store shares: the analysis of a sweep, the forecast, the report, the sweep's
own summary before a result is stored, and the commands. Computed from raw values only, never stored instead of them.

    steps   one run's rows: step-time summaries, throughput from timed windows, speed-up, efficiency, bandwidths
    noise   what tells configurations apart: spread between processes, noise bounds, comparisons, shown efficiency
    evidence  a configuration's evidence over sweeps (compare): process and sweep spread, Holm's correction

`from bench import stats` then `stats.summarize(...)`, `stats.noise_bound(...)`: both modules' names, read here.
"""
from bench.stats.noise import (  # noqa: F401
    NOT_MEASURED, UNSTABLE_REPEAT_SPREAD, Noise, ProcessComparison, ShownEfficiency,
    compare_pairs, compare_processes, device_word, host_noise, noise_bound, pair_noise,
    percent, repeat_spread, shown_efficiency, significance, sps_words, sweep_noise, unsteady, unsteady_words)
from bench.stats.evidence import (  # noqa: F401
    MIN_EVIDENCE_SWEEPS, Disturbing, Evidence, compare_with_evidence, disturbing_sweep, evidence, holm)
from bench.stats.steps import (  # noqa: F401
    PHASES_MS, UNSTABLE_IQR_FRACTION, Summary, algbw_gbps, allreduce_ms_at, busbw_gbps, efficiency, exposed_comm_ms,
    loss_not_finite, loss_words,
    median, result_summary, samples_per_s, slowest_rank_rows, speedup, step_times_ms, student_t, summarize,
    train_time_s, window_throughput)
