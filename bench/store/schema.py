"""The results store's tables, their version (`PRAGMA user_version`) and the migrations between versions.

    environments  what produced a measurement: torch/CUDA/cuDNN/NCCL versions, GPUs (UUID, PCI bus id,
                  clocks, power limit, topology in torch numbering), NCCL settings, CPU, host, git commit
    sweeps        one row per sweep: command line, resolved config, start/end, status
                  (running/completed/failed/interrupted/died), where an internal error's traceback went
    results       one row per configuration run: identity (workload, strategy, count, nodes, precision,
                  memory format, compilation, strategy options, optimizer, activation checkpointing), mode (bench,
                  equivalence, comm, loader, fit), status ok/failed/skipped/interrupted with
                  the reason, how it was timed, a summary derived from the raw rows by bench.stats, and the
                  training FLOPs of one sample counted on its model (bench.workloads.flops; its first repeat)
    windows       raw timed windows per rank: wall time (s), samples and steps (throughput is derived from them)
    steps         raw per-step, per-rank times (ms) of every phase; kind warmup, measure, probe_sync,
                  probe_no_sync (DDP's communication probe), equivalence, or profile_warmup and profile
                  (--profile's traced steps, after the measured window)
    memory        per device and rank: allocator peaks, device level as nvidia-smi shows it, the
                  benchmark's own artefacts, process RSS (MiB)
    epochs        per-epoch wall time, mean loss, data wait and split coverage (real-data runs with --epochs)
    comm          the collectives microbenchmark (bench.rank.commbench): per scope (world / node), collective
                  (op: all_reduce, all_gather, reduce_scatter) and size (nccl-tests' S: the whole array; for
                  all_gather its output, for reduce_scatter its input): time (ms, the slowest rank's mean),
                  algbw/busbw GB/s, the timed iterations, and how it was timed (timing: cuda_events or host_clock)
    nodes         multi-node runs: each node's host and environment
    traces        --profile: per configuration and rank, the trace's path and size, the traced steps, what
                  profiling cost (s: the traced steps and writing the trace in the rank, reading it in the
                  sweep), and the figures derived from the trace (bench.analysis.traces): shares of
                  the traced steps in computation, exposed communication, copies and idle; the share of
                  communication overlapped by computation; time waiting in collectives (ms, summed over the
                  traced steps) and how the collectives were matched across ranks (wait_match: seq, order); how
                  the trace was read (method: device_kernels, or host_ops where it holds no kernels); a note when
                  the trace was cut or could not be written
    buckets       when each DDP gradient bucket became ready in backward (ms from its start), its bytes, per rank
                  and step, recorded after the measured window; FSDP's units (kind 'fsdp_unit') and their bytes
    interference  the collectives beside computation (bench.rank.interference): per scope, collective and size, the
                  collective's time alone and while every rank computes a fixed load, and the load's time alone and
                  while the collective runs (ms), their ratios (comm_slowdown, compute_slowdown), the load's shape and
                  the rounds taken, each valid round's raw times (rounds_json); op 'co_run' is the load on every rank
                  at once against one rank alone (size 0; on CPU one row per workload, size its gradient bytes)
    gpu_samples   the GPU's state over the measured window, per rank and device, sampled by a thread that only calls
                  NVML (bench.machine.gpustate): time from the window's start (ms), SM clock and its maximum (MHz),
                  power and its enforced limit (W), temperature (C), NVML's clock event (throttle) reasons (bitmask)
    forecasts     the forecast's check against the truth: each measured count forecast from what the check may read
                  (basis: nothing of the judged count, or only the machine's own measurements there), beside the
                  measurement of its sweep or of a later one (judged_sweep), step time and memory per device, with
                  the errors, the range the inputs' spreads give the step and the memory, and whether each
                  measurement fell inside its range (bench.commands.forecast)
"""
from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 6
SCHEMA_HISTORY = {
    1: "first version: environments, sweeps, results, steps, memory, epochs, comm",
    2: "GPU-true timing and new axes: results gain precision, channels_last, compiled, options_json, nodes, launcher, "
       "timing_method, window_s, micro_batch, loader_workers, compile_s, numerics_json; windows and nodes tables; "
       "steps gain host_data_ms, buffers_ms, other_ms; memory gains device-level and artefact columns; comm gains "
       "scope and ranks; sweeps may be 'failed' and record traceback_path, a label and the sweep they were "
       "interleaved with (paired_with, A/B runs)",
    3: "profiler traces (--profile): a traces table, one row per configuration and rank; steps may be of kind "
       "profile_warmup and profile (the traced steps, after the measured window); the forecast: buckets table (DDP "
       "bucket ready times and sizes, FSDP units) and forecasts table (each measured count forecast from the "
       "smaller ones, with the error)",
    4: "the collectives microbenchmark measures all-gather and reduce-scatter beside all-reduce: comm gains op "
       "(all_reduce, all_gather, reduce_scatter; older rows are all_reduce) and timing (cuda_events or host_clock; "
       "older rows host_clock), and its key becomes (result_id, scope, op, size_bytes)",
    5: "memory per rank gains the training state counted from the tensors each rank holds (params_mib, grads_mib, "
       "optimizer_mib, buckets_mib: DDP's gradient buckets) and the process's RSS before the model was built "
       "(baseline_rss_mib); results gain optimizer (sgd or adamw; older rows sgd); an interference table (collectives "
       "beside computation); forecasts gain judged_sweep (the sweep measured; older rows their own), basis and the "
       "memory check (forecast_mem_mib, measured_mem_mib, mem_error, mem_method), keyed (sweep_id, judged_sweep, config_key); "
       "traces gain method (how the trace was read: device_kernels or host_ops; older rows host_ops on CPU, else empty) and "
       "wait_match (how collectives were matched across ranks: seq, order or seq+order; older rows order)",
    6: "the forecast's inputs keep their spread and its check its range: interference gains rounds_json (each valid "
       "round's raw times, ms: [comm_alone, comm_contended, load_contended, load_alone], co_run [solo, together] per "
       "chunk; older rows none: their spread unknown); forecasts gain forecast_step_ms_low and forecast_step_ms_high "
       "(the range the inputs' spreads give the forecast step) and in_range (the measured step inside it: 1 or 0; "
       "older rows none), and later forecast_mem_mib_low, forecast_mem_mib_high and mem_in_range (the memory's range "
       "and the measured peak inside it; added to a version-6 store without them when a check is next written, "
       "older rows none); "
       "traces gain work_ms (the device's computation and copies over the traced steps, collectives left out: a "
       "kernel waiting for a peer is not work), devices_json (the same figures per GPU: a DataParallel process drives "
       "several) and step_waits_json (each traced step's wait in collectives: the straggler's evidence); older rows "
       "empty. Memory gains the whole run's peaks before the post-warm-up reset (run_peak_allocated_mib, "
       "run_peak_reserved_mib, run_device_used_mib: warm-up, compilation, cuDNN's autotuning); older rows empty. "
       "Memory levers: results gain activation_checkpointing (none, full or selective:K; older rows none), and mode may "
       "be 'fit' (a trial of ./run_bench.sh fit: one configuration at one per-device batch, whether it fit in "
       "details_json); find_unused_parameters (DDP, ZeRO) and offload (FSDP, HSDP) are strategy settings in options_json; "
       "model FLOPs utilisation and the GPU's state: results gain flops_per_sample (training FLOPs of one sample, "
       "forward and backward, counted by FlopCounterMode on the model; NULL where not counted: older rows, repeats "
       "after the first), hw_flops_per_sample (the same with recomputation, where activation checkpointing "
       "recomputes) and flops_json (how it was counted, per op, what the counter missed, the workload's analytic "
       "figure); a gpu_samples table (SM clock, power, temperature and throttle reasons over the measured window, per "
       "rank and device)",
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS environments (
    env_id INTEGER PRIMARY KEY,
    captured_at TEXT NOT NULL,
    hostname TEXT, python TEXT, torch TEXT, torchvision TEXT, cuda TEXT, cudnn TEXT, nccl TEXT,
    gpu_names TEXT, gpu_driver TEXT, cpu_model TEXT, cpu_cores INTEGER, git_commit TEXT,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'interrupted', 'died')),
    command_line TEXT NOT NULL,
    config_json TEXT NOT NULL,
    hostname TEXT, pid INTEGER,
    env_id INTEGER REFERENCES environments(env_id),
    resumed INTEGER NOT NULL DEFAULT 0,
    traceback_path TEXT,
    label TEXT,
    paired_with INTEGER REFERENCES sweeps(sweep_id)
);
CREATE TABLE IF NOT EXISTS results (
    result_id INTEGER PRIMARY KEY,
    sweep_id INTEGER NOT NULL REFERENCES sweeps(sweep_id),
    env_id INTEGER REFERENCES environments(env_id),
    config_key TEXT NOT NULL,
    mode TEXT NOT NULL,
    workload TEXT NOT NULL, strategy TEXT NOT NULL, device_type TEXT NOT NULL,
    device_count INTEGER NOT NULL, per_device_batch INTEGER NOT NULL, global_batch INTEGER NOT NULL,
    image_size INTEGER, scaling TEXT, data TEXT, repeat INTEGER NOT NULL DEFAULT 0,
    threads_per_process INTEGER,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'skipped', 'interrupted')),
    reason TEXT,
    failed_rank INTEGER,
    started_at TEXT, ended_at TEXT, wall_s REAL,
    n_steps INTEGER, samples_per_s REAL,
    step_ms_median REAL, step_ms_p10 REAL, step_ms_p90 REAL, step_ms_iqr REAL,
    step_ms_mean REAL, step_ms_ci95_low REAL, step_ms_ci95_high REAL, unstable INTEGER,
    params INTEGER, grad_mib REAL,
    exposed_comm_ms REAL, comm_method TEXT,
    spec_json TEXT NOT NULL,
    details_json TEXT,
    precision TEXT NOT NULL DEFAULT 'fp32', channels_last INTEGER NOT NULL DEFAULT 0, compiled INTEGER NOT NULL DEFAULT 0,
    options_json TEXT, nodes INTEGER NOT NULL DEFAULT 1, launcher TEXT,
    timing_method TEXT, window_s REAL, micro_batch INTEGER, loader_workers INTEGER, compile_s REAL, numerics_json TEXT,
    optimizer TEXT NOT NULL DEFAULT 'sgd',
    activation_checkpointing TEXT NOT NULL DEFAULT 'none',
    flops_per_sample REAL, hw_flops_per_sample REAL, flops_json TEXT
);
CREATE INDEX IF NOT EXISTS results_by_sweep ON results(sweep_id, config_key);
CREATE TABLE IF NOT EXISTS windows (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    rank INTEGER NOT NULL, kind TEXT NOT NULL, first_step INTEGER NOT NULL,
    wall_s REAL NOT NULL, samples INTEGER NOT NULL, steps INTEGER NOT NULL,
    PRIMARY KEY (result_id, rank, kind, first_step)
);
CREATE TABLE IF NOT EXISTS steps (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    kind TEXT NOT NULL DEFAULT 'measure',
    rank INTEGER NOT NULL, step INTEGER NOT NULL,
    step_ms REAL NOT NULL, data_ms REAL, h2d_ms REAL, forward_ms REAL, backward_ms REAL, optimizer_ms REAL,
    loss REAL, host_data_ms REAL, buffers_ms REAL, other_ms REAL,
    PRIMARY KEY (result_id, kind, rank, step)
);
CREATE TABLE IF NOT EXISTS memory (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    rank INTEGER NOT NULL, device TEXT NOT NULL, device_name TEXT,
    peak_allocated_mib REAL, peak_reserved_mib REAL, peak_rss_mib REAL,
    device_used_mib REAL, process_used_mib REAL, artefact_mib REAL, method TEXT,
    params_mib REAL, grads_mib REAL, optimizer_mib REAL, buckets_mib REAL, baseline_rss_mib REAL,
    run_peak_allocated_mib REAL, run_peak_reserved_mib REAL, run_device_used_mib REAL,
    PRIMARY KEY (result_id, rank, device)
);
CREATE TABLE IF NOT EXISTS epochs (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    epoch INTEGER NOT NULL, wall_s REAL NOT NULL, mean_loss REAL, data_wait_s REAL,
    samples INTEGER, steps INTEGER,
    images INTEGER, images_seen INTEGER, images_repeated INTEGER, images_dropped INTEGER,
    PRIMARY KEY (result_id, epoch)
);
CREATE TABLE IF NOT EXISTS comm (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    scope TEXT NOT NULL DEFAULT 'world', ranks INTEGER,
    op TEXT NOT NULL DEFAULT 'all_reduce',
    size_bytes INTEGER NOT NULL, time_ms REAL NOT NULL, algbw_gbps REAL, busbw_gbps REAL, iters INTEGER,
    timing TEXT,
    PRIMARY KEY (result_id, scope, op, size_bytes)
);
CREATE TABLE IF NOT EXISTS traces (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    rank INTEGER NOT NULL, path TEXT, trace_bytes INTEGER, json_bytes INTEGER,
    steps INTEGER, first_step INTEGER, profile_s REAL, export_s REAL, read_s REAL, note TEXT, error TEXT,
    span_ms REAL, compute_ms REAL, comm_ms REAL, copy_ms REAL, idle_ms REAL, overlap_ms REAL, exposed_comm_ms REAL,
    wait_ms REAL, compute_share REAL, comm_share REAL, copy_share REAL, idle_share REAL, overlap_share REAL,
    method TEXT, wait_match TEXT,
    work_ms REAL, devices_json TEXT, step_waits_json TEXT,
    PRIMARY KEY (result_id, rank)
);
CREATE TABLE IF NOT EXISTS nodes (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    node_rank INTEGER NOT NULL, hostname TEXT, env_json TEXT,
    PRIMARY KEY (result_id, node_rank)
);
CREATE TABLE IF NOT EXISTS buckets (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    kind TEXT NOT NULL DEFAULT 'ddp',
    rank INTEGER NOT NULL, step INTEGER NOT NULL, bucket INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL, ready_ms REAL, backward_ms REAL,
    PRIMARY KEY (result_id, kind, rank, step, bucket)
);
CREATE TABLE IF NOT EXISTS interference (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    scope TEXT NOT NULL DEFAULT 'world', ranks INTEGER, op TEXT NOT NULL, size_bytes INTEGER NOT NULL,
    comm_alone_ms REAL, comm_contended_ms REAL, compute_alone_ms REAL, compute_contended_ms REAL,
    comm_slowdown REAL, compute_slowdown REAL, load TEXT, rounds INTEGER, timing TEXT, rounds_json TEXT,
    PRIMARY KEY (result_id, scope, op, size_bytes)
);
CREATE TABLE IF NOT EXISTS gpu_samples (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    rank INTEGER NOT NULL, device TEXT NOT NULL, sample INTEGER NOT NULL, t_ms REAL NOT NULL,
    sm_clock_mhz REAL, sm_clock_max_mhz REAL, power_w REAL, power_limit_w REAL, temperature_c REAL, reasons INTEGER,
    PRIMARY KEY (result_id, rank, device, sample)
);
CREATE TABLE IF NOT EXISTS forecasts (
    sweep_id INTEGER NOT NULL REFERENCES sweeps(sweep_id),
    judged_sweep INTEGER NOT NULL REFERENCES sweeps(sweep_id),
    config_key TEXT NOT NULL,
    workload TEXT NOT NULL, strategy TEXT NOT NULL, variant TEXT, device_count INTEGER NOT NULL,
    from_counts TEXT NOT NULL,
    forecast_step_ms REAL, measured_step_ms REAL, error REAL,
    forecast_samples_per_s REAL, measured_samples_per_s REAL,
    compute_error REAL, noise REAL, why TEXT, network TEXT, created_at TEXT NOT NULL,
    basis TEXT, forecast_mem_mib REAL, measured_mem_mib REAL, mem_error REAL, mem_method TEXT,
    forecast_step_ms_low REAL, forecast_step_ms_high REAL, in_range INTEGER,
    forecast_mem_mib_low REAL, forecast_mem_mib_high REAL, mem_in_range INTEGER,
    PRIMARY KEY (sweep_id, judged_sweep, config_key)
);
"""

STEP_COLUMNS = ("kind", "rank", "step", "step_ms", "data_ms", "h2d_ms", "forward_ms", "backward_ms", "optimizer_ms",
                "loss", "host_data_ms", "buffers_ms", "other_ms")
MEMORY_COLUMNS = ("rank", "device", "device_name", "peak_allocated_mib", "peak_reserved_mib", "peak_rss_mib",
                  "device_used_mib", "process_used_mib", "artefact_mib", "method", "params_mib", "grads_mib",
                  "optimizer_mib", "buckets_mib", "baseline_rss_mib", "run_peak_allocated_mib", "run_peak_reserved_mib",
                  "run_device_used_mib")
EPOCH_COLUMNS = ("epoch", "wall_s", "mean_loss", "data_wait_s", "samples", "steps",
                 "images", "images_seen", "images_repeated", "images_dropped")
COMM_COLUMNS = ("scope", "ranks", "op", "size_bytes", "time_ms", "algbw_gbps", "busbw_gbps", "iters", "timing")
WINDOW_COLUMNS = ("rank", "kind", "first_step", "wall_s", "samples", "steps")
TRACE_COLUMNS = ("rank", "path", "trace_bytes", "json_bytes", "steps", "first_step", "profile_s", "export_s", "read_s",
                 "note", "error", "span_ms", "compute_ms", "comm_ms", "copy_ms", "idle_ms", "overlap_ms", "exposed_comm_ms",
                 "wait_ms", "compute_share", "comm_share", "copy_share", "idle_share", "overlap_share", "method",
                 "wait_match", "work_ms", "devices_json", "step_waits_json")
BUCKET_COLUMNS = ("kind", "rank", "step", "bucket", "size_bytes", "ready_ms", "backward_ms")
INTERFERENCE_COLUMNS = ("scope", "ranks", "op", "size_bytes", "comm_alone_ms", "comm_contended_ms", "compute_alone_ms",
                        "compute_contended_ms", "comm_slowdown", "compute_slowdown", "load", "rounds", "timing",
                        "rounds_json")
GPU_SAMPLE_COLUMNS = ("rank", "device", "sample", "t_ms", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w",
                      "temperature_c", "reasons")
FORECAST_COLUMNS = ("judged_sweep", "config_key", "workload", "strategy", "variant", "device_count", "from_counts",
                    "forecast_step_ms", "measured_step_ms", "error", "forecast_samples_per_s", "measured_samples_per_s",
                    "compute_error", "noise", "why", "network", "created_at", "basis", "forecast_mem_mib",
                    "measured_mem_mib", "mem_error", "mem_method", "forecast_step_ms_low", "forecast_step_ms_high",
                    "in_range", "forecast_mem_mib_low", "forecast_mem_mib_high", "mem_in_range")
# Columns added to version 6 after stores of it were written (additive: no version of their own). A version-6 store
# without them reads as before (its rows' values None); the first check written into it adds them (`add_late_columns`).
LATE_V6 = {"forecasts": ("forecast_mem_mib_low REAL", "forecast_mem_mib_high REAL", "mem_in_range INTEGER")}


def create(conn: sqlite3.Connection) -> None:
    for stmt in SCHEMA.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _columns(conn: sqlite3.Connection, table: str) -> list:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def add_late_columns(conn: sqlite3.Connection) -> None:
    """Give a version-6 store the columns added to its version since it was written (LATE_V6), inside the caller's
    write transaction; a store that has them is left as it is."""
    for table, cols in LATE_V6.items():
        have = _columns(conn, table)
        for col in cols:
            if col.split()[0] not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {col}")


def _rebuild(conn: sqlite3.Connection, table: str, fill: dict) -> None:
    """Recreate `table` with today's definition (new CHECKs, keys), copying rows; fill: new column -> SQL value."""
    old = _columns(conn, table)
    conn.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
    stmt = next(s for s in SCHEMA.split(";") if f"CREATE TABLE IF NOT EXISTS {table} (" in s)
    conn.execute(stmt)
    new = _columns(conn, table)
    cols = [c for c in new if c in old or c in fill]
    values = [c if c in old else fill[c] for c in cols]
    conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(values)} FROM {table}_v1")
    conn.execute(f"DROP TABLE {table}_v1")


def migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a store of an older version to SCHEMA_VERSION, inside the caller's write transaction.
    Every row is kept; new columns of old rows are empty (or their version-1 meaning)."""
    # Renaming a table must not rewrite the other tables' references to it (they point at the new one).
    conn.execute("PRAGMA legacy_alter_table = ON")
    if version == 1:
        _rebuild(conn, "sweeps", {})
        _rebuild(conn, "results", {})
        conn.execute("CREATE INDEX IF NOT EXISTS results_by_sweep ON results(sweep_id, config_key)")
        _rebuild(conn, "comm", {"scope": "'world'", "op": "'all_reduce'", "timing": "'host_clock'",
                                "ranks": "(SELECT device_count FROM results r WHERE r.result_id = comm_v1.result_id)"})
        for table in ("steps", "memory"):
            _rebuild(conn, table, {})
        create(conn)  # the tables version 1 did not have
        version = 2
    if version == 2:
        create(conn)  # version 3 adds the traces, buckets and forecasts tables; no other table changed
        version = 3
    if version == 3:  # every row so far was an all-reduce timed by the host clock (CUDA: synchronised around the loop)
        _rebuild(conn, "comm", {"op": "'all_reduce'", "timing": "'host_clock'"})
        version = 4
    if version == 4:  # every check so far judged its own sweep; every run so far trained with SGD
        _rebuild(conn, "forecasts", {"judged_sweep": "sweep_id"})
        for table, cols in (("results", ("optimizer TEXT NOT NULL DEFAULT 'sgd'",)),
                            ("memory", ("params_mib REAL", "grads_mib REAL", "optimizer_mib REAL", "buckets_mib REAL",
                                        "baseline_rss_mib REAL"))):
            for col in cols:  # a store of version 1 had its tables rebuilt with today's columns above
                if col.split()[0] not in _columns(conn, table):
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {col}")
        create(conn)  # the interference table (and any other a partial store lacks)
        if "method" not in _columns(conn, "traces"):  # how older rows were read and matched, where that is known
            conn.execute("ALTER TABLE traces ADD COLUMN method TEXT")
            conn.execute("ALTER TABLE traces ADD COLUMN wait_match TEXT")
            conn.execute("UPDATE traces SET method = 'host_ops' WHERE span_ms IS NOT NULL AND result_id IN "
                         "(SELECT result_id FROM results WHERE device_type = 'cpu')")  # a CPU trace holds no kernels
            conn.execute("UPDATE traces SET wait_match = 'order' WHERE wait_ms IS NOT NULL")  # the only way then
        version = 5
    if version == 5:  # the forecast's spreads: older interference rows kept no rounds, older checks no range; nothing
        # measured the device's work apart from its collectives, nor the whole run's memory peak
        for table, cols in (("interference", ("rounds_json TEXT",)),
                            ("forecasts", ("forecast_step_ms_low REAL", "forecast_step_ms_high REAL", "in_range INTEGER")),
                            ("traces", ("work_ms REAL", "devices_json TEXT", "step_waits_json TEXT")),
                            ("memory", ("run_peak_allocated_mib REAL", "run_peak_reserved_mib REAL",
                                        "run_device_used_mib REAL"))):
            for col in cols:  # a store of version 1 or 2 had these tables made with today's columns above
                if col.split()[0] not in _columns(conn, table):
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {col}")
        # memory levers: every run so far kept its activations
        if "activation_checkpointing" not in _columns(conn, "results"):  # a store of version 1 was rebuilt with it
            conn.execute("ALTER TABLE results ADD COLUMN activation_checkpointing TEXT NOT NULL DEFAULT 'none'")
        # model FLOPs utilisation: nothing counted FLOPs or sampled the GPU before; the columns stay NULL
        for col in ("flops_per_sample REAL", "hw_flops_per_sample REAL", "flops_json TEXT"):
            if col.split()[0] not in _columns(conn, "results"):  # a store of version 1 had results rebuilt above
                conn.execute(f"ALTER TABLE results ADD COLUMN {col}")
        create(conn)  # the gpu_samples table
        version = 6
    add_late_columns(conn)  # the forecast check's memory range (LATE_V6): a version-6 store may lack them too
    conn.execute("PRAGMA legacy_alter_table = OFF")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
