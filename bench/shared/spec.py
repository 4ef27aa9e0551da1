"""One configuration as the worker runs it: `RunSpec`, serialised to OUT_DIR/spec.json for every process of
the run; and `Skip`, a configuration that will not run, with its reason. bench.sweep.plan makes both."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

# Strategies that run one process per device (torchrun), each building its own replica or shard of the model.
PER_DEVICE = ("ddp", "zero", "fsdp", "hsdp")
DDP_BASED = ("ddp", "zero")     # DistributedDataParallel underneath: DDP's settings, probe and buckets apply
FSDP_BASED = ("fsdp", "hsdp")   # FSDP2 fully_shard underneath: its settings and collectives apply
STRATEGY_NAMES = {"single": "single device", "dp": "DataParallel", "ddp": "DDP", "zero": "DDP+ZeRO", "fsdp": "FSDP",
                  "hsdp": "HSDP"}  # each strategy's one name in words, in the report and the forecast alike
# The comm run's bandwidth rows, written by its rank 0 to the run folder before the interference stage (bench.rank.commrun):
# what the sweep keeps of a comm run that failed in that stage (bench.sweep.launch).
COMM_ROWS_FILE = "comm-rows.json"
# HSDP whose one shard group holds every rank: FSDP's sharding, but on HSDP's 2-D mesh, so FSDP2 still all-reduces each
# unit's reduced gradient shard over the replicate dimension (a group of one rank) on a stream of its own, every step
# (torch's _fsdp_collectives.foreach_reduce: all_reduce_group is set for any HSDP mesh). What that costs is no constant:
# one H100 (examples/h100-2026-11-24) stepped 53% slower than FSDP, one H200's transformer 13% (its median step), and
# the H200 rehearsal's HSDP x2 on gloo ran 2.4x FSDP's throughput; the note once printed the H100's 53% in every report
# (trial A, finding 2), so it carries no figure: a report gives its own sweep's HSDP beside FSDP at the same count.
ONE_SHARD_GROUP = ("one shard group: FSDP's sharding on HSDP's 2-D mesh, which still all-reduces every gradient shard "
                   "over a replicate group of one rank; not FSDP: that all-reduce runs every step, on a stream of its own")


def default_mesh(shard_size, devices_per_node: int) -> bool:
    """Whether an HSDP run's stored shard size is the default mesh (one shard group per node: its devices per node), which
    changes with the count and so names no setting; the report's variants and the forecast's counts read it alike."""
    return bool(shard_size) and bool(devices_per_node) and int(shard_size) == devices_per_node


@dataclass(frozen=True)
class RunSpec:
    """One configuration, run once in fresh process(es). Serialised to JSON for the worker."""
    workload: str
    strategy: str
    device_type: str
    device_count: int
    per_device_batch: int      # samples per replica per optimizer step
    global_batch: int          # samples per optimizer step, all replicas together
    image_size: int            # 0: not an image model
    steps: int
    warmup: int
    threads: int               # torch threads per process (CPU); 0 = torch default
    seed: int
    scaling: str
    repeat: int = 0
    micro_batch: int = 0       # samples per replica per forward; < per_device_batch: gradient accumulation
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    options: tuple = ()        # strategy settings, sorted (name, value) pairs: DDP knobs, FSDP policy
    nodes: int = 1
    launcher: str = "local"
    data: str = "synthetic"
    voc_root: str = ""
    download: bool = False
    epochs: int = 0            # 0: fixed steps
    checkpoint: bool = False
    num_workers: int = 0       # DataLoader workers of each process
    pin_memory: bool = False
    persistent_workers: bool = False
    synthetic_width: int = 1024
    synthetic_depth: int = 4
    synthetic_repeats: int = 1
    weights: str = ""
    sync_bn: bool = False
    pg_timeout_s: float = 120.0
    mode: str = "bench"        # bench | equivalence | comm | loader
    emulate_ranks: int = 1     # equivalence reference: one process feeding N replicas' batches
    comm_max_bytes: int = 0    # comm mode: largest collective message (the largest model's gradients)
    comm_extra_bytes: tuple = ()  # comm mode: DDP's bucket sizes, measured as well
    comm_state_bytes: tuple = ()  # comm mode: each workload's gradient bytes: a CPU co-run per size (rank.interference)
    comm_ops: tuple = ("all_reduce",)  # comm mode: the collectives to measure (bench.rank.commbench.OPS)
    interference: bool = False  # comm mode: also each collective beside a compute load (bench.rank.interference)
    comm_load: tuple = ()      # comm mode: the load's GEMM (M, K), sized like the model's layers; () the device's default
    out_dir: str = ""
    profile_steps: int = 0     # --profile: steps traced after the measured window (bench.rank.profile); 0: none
    profile_max_mb: float = 0.0  # largest gzipped trace kept per rank, MB
    trace_prefix: str = ""     # each rank writes <trace_prefix>-rank<R>.pt.trace.json.gz (bench.sweep.profiling)
    min_window_s: float = 0.0  # bench mode, fixed steps: measure more than `steps` until the window lasts this long (0: exactly `steps`)
    loaders: int = 1           # loader mode: concurrent loader processes (the configuration's ranks on one node)
    optimizer: str = "sgd"     # sgd | adamw (bench.rank.optimizer)
    activation_checkpointing: str = "none"  # none | full | selective:K (bench.rank.activations)
    transformer_layers: int = 0  # the transformer workload's shape (bench.workloads.transformer); 0: not the transformer
    transformer_width: int = 0
    transformer_heads: int = 0
    transformer_vocab: int = 0
    seq_len: int = 0           # tokens per sample
    deeplabv3_aux: str = "false"  # deeplabv3's auxiliary classifier: false | true (in the loss at 0.5) | unused
    process_start: str = "fresh"  # fresh: each process a new interpreter; forked: from the fork server (bench.shared.forkserver)

    @property
    def accum_steps(self) -> int:
        return self.per_device_batch // (self.micro_batch or self.per_device_batch)

    @property
    def processes(self) -> int:
        if self.strategy == "loader":
            return self.loaders
        return self.device_count if self.strategy in PER_DEVICE + ("comm",) else 1

    def option(self, name: str, default=None):
        return dict(self.options).get(name, default)

    @property
    def key(self) -> str:
        """Identity of the configuration (without repeat/out_dir), used for resume, reports and compare."""
        nodes = f"n{self.nodes}" if self.nodes > 1 else ""
        extra = "".join(("/channels_last" if self.channels_last else "", "/compiled" if self.compile else "",
                         "/" + ",".join(f"{k}={v}" for k, v in self.options) if self.options else "",
                         f"/{self.optimizer}" if self.optimizer != "sgd" else "",  # sgd: the keys of older stores
                         f"/ac={self.activation_checkpointing}" if self.activation_checkpointing != "none" else "",
                         f"/aux={self.deeplabv3_aux}" if self.deeplabv3_aux != "false" else "",
                         f"/L{self.transformer_layers}d{self.transformer_width}h{self.transformer_heads}v{self.transformer_vocab}"
                         f"t{self.seq_len}" if self.transformer_layers else ""))
        return (f"{self.mode}/{self.workload}/{self.strategy}/{self.device_type}x{self.device_count}{nodes}"
                f"/b{self.per_device_batch}/g{self.global_batch}/i{self.image_size}/{self.data}/{self.precision}{extra}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        raw = json.loads(text)
        raw["options"] = tuple(tuple(p) for p in raw.get("options", ()))
        raw["comm_extra_bytes"] = tuple(raw.get("comm_extra_bytes", ()))
        raw["comm_state_bytes"] = tuple(raw.get("comm_state_bytes", ()))
        raw["comm_ops"] = tuple(raw.get("comm_ops", ("all_reduce",)))
        raw["comm_load"] = tuple(raw.get("comm_load", ()))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


@dataclass(frozen=True)
class Skip:
    """A configuration that will not run, recorded in the store with its reason."""
    spec: RunSpec
    reason: str
