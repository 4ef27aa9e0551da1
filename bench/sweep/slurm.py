"""SLURM: reading the allocation the sweep runs in, and launching a configuration over several of its nodes.

The sweep runs once, as a plain process on the allocation's first node (the batch script, or the
salloc shell). A configuration spanning K nodes becomes one `srun` step over K nodes, one task per
node, each task a torchrun that rendezvouses with the others through c10d (bench.sweep.launch):
    srun --nodes K --ntasks-per-node 1 --cpus-per-task C --kill-on-bad-exit=1 --job-name bench-run-XXXX \\
        python -m bench.sweep.torchrun --nnodes K --nproc-per-node G --rdzv-backend c10d \\
        --rdzv-endpoint RUN_DIR/rendezvous --rdzv-conf store_type=file --rdzv-id bench-run-XXXX ...
C is the CPUs the allocation holds on a node (`node_cpus`): the one task is torchrun with all of the node's ranks.
Results, errors, heartbeats and the rendezvous travel through the run folder next to the store, on a
filesystem every node must reach: `check_shared_folder` verifies that up front. c10d picks node
ranks itself, so global rank 0 may run on any node; it writes the result file there for the sweep.
Ending a configuration cancels its step by id (`scancel JOB.STEP`), so nothing is left on any node.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench.config import ConfigError

SRUN_CHECK_S = 120.0
CANCEL_GRACE_S = 3.0
STEP_WAIT_S = 60          # srun --wait: once one node's task has ended, the others get this long


def in_allocation() -> bool:
    return "SLURM_JOB_ID" in os.environ


def allocation_nodes() -> int:
    """Nodes of the SLURM allocation this process runs in (0 outside one)."""
    if not in_allocation():
        return 0
    for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def expand_nodelist(value: str) -> list:
    """Host names of SLURM's compressed node list ('gpu[01-03,07],login2' -> gpu01, gpu02, gpu03, gpu07, login2);
    [] where the value is not in that form."""
    names = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", value):
        parts = re.split(r"\[([^\]]*)\]", item)     # text, ranges, text, ranges, ...
        expanded = [""]
        for i, part in enumerate(parts):
            if i % 2 == 0:
                expanded = [e + part for e in expanded]
                continue
            choices = []
            for r in part.split(","):
                lo, _, hi = r.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()):
                    return []
                choices += [str(k).zfill(len(lo)) for k in range(int(lo), int(hi or lo) + 1)]
            expanded = [e + c for e in expanded for c in choices]
        names += expanded
    return names


def on_allocated_node(env=None, host: str | None = None) -> bool:
    """Whether this process runs on a node of the SLURM allocation it is inside (True outside one). slurmd sets
    SLURMD_NODENAME in batch scripts and srun steps; a salloc shell runs where salloc was typed, a login node, without
    it, unless this host is named in the allocation's node list (salloc typed on a node of its own allocation)."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env or env.get("SLURMD_NODENAME", "").strip():
        return True
    import socket
    short = (host or socket.gethostname()).split(".")[0]
    listed = expand_nodelist(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "")
    return short in {n.split(".")[0] for n in listed}


# What says an allocation holds GPUs (sbatch/salloc/srun's output variables): GPU ids, counts ([type:]count), TRES
GPU_ID_VARS = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS")
GPU_COUNT_VARS = ("SLURM_GPUS_ON_NODE", "SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK")
TRES_VARS = ("SLURM_TRES_PER_NODE", "SLURM_TRES_PER_TASK", "SLURM_JOB_GRES")


def _gpus_in(item: str) -> int:
    """GPUs of one '[type:]count' or TRES item ('8', 'a100:8', 'gres/gpu:a100:2', 'gres/gpu=2'; a type alone: 1)."""
    tail = re.split(r"[:=]", item.strip())[-1]
    return int(tail) if tail.isdigit() else (1 if tail else 0)


def allocation_gpus(env=None) -> str | None:
    """'NAME=VALUE' of the first variable saying that the SLURM allocation this process runs in holds GPUs; None
    outside an allocation or in one without GPUs (--gpus-per-node=0)."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return None
    for name in GPU_ID_VARS:
        if env.get(name, "").strip() not in ("", "(null)", "N/A"):
            return f"{name}={env[name]}"
    for name in GPU_COUNT_VARS:
        if env.get(name, "").strip() and _gpus_in(env[name]) > 0:
            return f"{name}={env[name]}"
    for name in TRES_VARS:
        if any("gpu" in item and _gpus_in(item) > 0 for item in env.get(name, "").split(",")):
            return f"{name}={env[name]}"
    return None


def refuse_task_copies() -> None:
    """ConfigError when this sweep is one of several tasks of an srun step (it would run that many times)."""
    ntasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or ""
    if ("SLURM_STEP_ID" in os.environ or "SLURM_STEPID" in os.environ) and ntasks.isdigit() and int(ntasks) > 1:
        raise ConfigError(f"this sweep was started as task {os.environ.get('SLURM_PROCID', '?')} of {ntasks} SLURM tasks "
                          f"(srun -n {ntasks} ...): it would run {ntasks} times and each would write the store. Start it "
                          "once, from the batch script or the salloc shell, without srun (see slurm/bench.sbatch): it "
                          "launches srun over the nodes each configuration needs")


def step_name(spec) -> str:
    return "bench-" + os.path.basename(spec.out_dir.rstrip("/"))


def per_node_counts(value: str) -> list:
    """SLURM's per-node counts, '96(x2),48' -> [96, 96, 48] (SLURM_JOB_CPUS_PER_NODE, SLURM_TASKS_PER_NODE); [] where
    the value is empty or not in that form."""
    out = []
    for item in value.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            return []
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _count(env, name: str) -> int:
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() else 0


def node_cpus(env=None) -> int:
    """The CPUs the allocation holds on each of its nodes, 0 where no variable says. The smallest over the allocation's
    nodes: srun picks a step's nodes, and each must give its task that many. In order: SLURM_JOB_CPUS_PER_NODE
    ('96(x2),48'), SLURM_CPUS_ON_NODE (this node's), SLURM_CPUS_PER_TASK x the tasks per node (SLURM_NTASKS_PER_NODE,
    else SLURM_TASKS_PER_NODE, else 1), SLURM_CPUS_PER_GPU x the GPUs per node."""
    env = os.environ if env is None else env
    counts = per_node_counts(env.get("SLURM_JOB_CPUS_PER_NODE", ""))
    if counts and min(counts) > 0:
        return min(counts)
    if _count(env, "SLURM_CPUS_ON_NODE"):
        return _count(env, "SLURM_CPUS_ON_NODE")
    if _count(env, "SLURM_CPUS_PER_TASK"):
        tasks = _count(env, "SLURM_NTASKS_PER_NODE") or min(per_node_counts(env.get("SLURM_TASKS_PER_NODE", "")) or [1])
        return _count(env, "SLURM_CPUS_PER_TASK") * max(1, tasks)
    gpus = next((_gpus_in(env[v]) for v in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE") if env.get(v, "").strip()), 0)
    return _count(env, "SLURM_CPUS_PER_GPU") * gpus


def cpus_per_task(env=None) -> list:
    """srun's --cpus-per-task for a step's one task per node: the node's CPUs in the allocation (node_cpus), since that
    task is torchrun, which starts all of the node's ranks (with NCCL's proxies and the loaders). srun would give it
    less: since Slurm 22.05 it does not inherit --cpus-per-task from salloc/sbatch (one CPU where cores are confined),
    and where it does (SRUN_CPUS_PER_TASK; SLURM_CPUS_PER_TASK again from 23.11) that is one rank's figure, 12 of a
    node's 96 under --ntasks-per-node=8 --cpus-per-task=12, while the sweep's one-node configurations had all 96: the
    1 -> 2 node step would be the launcher's. Nothing where no variable says (the report warns after the fact:
    bench.analysis.nodes)."""
    cpus = node_cpus(env)
    return [f"--cpus-per-task={cpus}"] if cpus else []


PER_TASK_GPUS = ("SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_GPU_BIND")


def inherited_unsets(env=None) -> list:
    """`env -u VAR ...` before srun for the allocation's variables srun reads as options of its own that misshape a
    step of one task per node (torchrun, all of the node's ranks):
      - SLURM_CPUS_PER_GPU where the step passes --cpus-per-task: srun reads it as its own --cpus-per-gpu, which Slurm
        refuses beside --cpus-per-task on one command line (newer sruns drop it from the environment, 22.05 sends both);
      - per-task GPU requests (an allocation made with --gpus-per-task=1 or --gpu-bind=per_task:1; 23.11's
        SLURM_TRES_PER_TASK): the step's one task per node would get ONE GPU, and local ranks 1.. fail with 'invalid
        device ordinal'. Without them a step that asks for no GPUs gets every GPU the job holds on its nodes."""
    env = os.environ if env is None else env
    names = (["SLURM_CPUS_PER_GPU"] if env.get("SLURM_CPUS_PER_GPU") and cpus_per_task(env) else []) \
        + [n for n in PER_TASK_GPUS if env.get(n)]
    return ["env", *[a for n in names for a in ("-u", n)]] if names else []


def in_step(env=None) -> bool:
    """Whether this process runs inside an srun step (`srun --pty bash`), not a batch script or a salloc shell."""
    env = os.environ if env is None else env
    return env.get("SLURM_STEP_ID", "").strip() not in ("", "batch", "extern")


def overlap(env=None) -> list:
    """`--overlap` where the sweep itself runs inside a step (`srun --pty bash`, the way out of a login node): since
    Slurm 20.11 steps share no CPUs, memory or GPUs without it, and a step asking for all of a node's CPUs waits behind
    the shell's own step until srun's --immediate gives up ('Requested nodes are busy')."""
    return ["--overlap"] if in_step(env) else []


def shell_command(env=None) -> str:
    """The shell step to run the sweep from on an allocation's node, with the node's CPUs in the allocation: a bare
    `srun --pty bash` gets one CPU where cores are confined (since Slurm 22.05 srun inherits no --cpus-per-task from
    salloc/sbatch), and every one-node configuration's ranks then share it."""
    cpus = node_cpus(env)
    return (f"srun --nodes=1 --ntasks=1 --cpus-per-task={cpus or 'N'} --pty bash"
            + ("" if cpus else " (N: the CPUs the allocation holds on a node; no SLURM variable here says)"))


def cores_way_out(need: int, env=None) -> str:
    """How this sweep's process gets `need` CPUs on its node, where it has fewer: a new shell step with the node's CPUs
    (inside an srun step), a larger allocation (a batch script, or a step whose allocation holds fewer), or a container's
    or CPU set's limit raised (outside SLURM)."""
    env = os.environ if env is None else env
    held = node_cpus(env)
    more = (f"allocate at least {need} CPUs a node (--cpus-per-task={need} with --ntasks-per-node=1, --cpus-per-gpu, "
            "or --exclusive)")
    if "SLURM_JOB_ID" not in env:
        return (f"if a container or a CPU set confines it, give it at least {need} CPUs (docker run --cpus={need}, or "
                f"--cpuset-cpus naming {need} cores; taskset and numactl likewise)")
    if in_step(env):
        step = (f"this shell is SLURM step {env.get('SLURM_JOB_ID')}.{env.get('SLURM_STEP_ID')}, and srun gives a step "
                "one CPU a task unless told (since Slurm 22.05 it inherits no --cpus-per-task from salloc/sbatch): ")
        if held >= need:
            return step + f"leave it and run the sweep from {shell_command(env)}"
        return step + (f"the allocation holds {held} CPU(s) a node, so " if held else "") + more + \
            f", then run the sweep from srun --nodes=1 --ntasks=1 --cpus-per-task={need} --pty bash"
    return (f"the allocation holds {held} CPU(s) on this node: " if held else "") + more


def command(spec, spec_path: str, rendezvous: list, worker: str, torchrun: str) -> list:
    per_node = spec.device_count // spec.nodes
    return [*inherited_unsets(), "srun", f"--nodes={spec.nodes}", f"--ntasks={spec.nodes}", "--ntasks-per-node=1",
            *cpus_per_task(), *overlap(),
            "--kill-on-bad-exit=1", f"--wait={STEP_WAIT_S}", "--immediate=60", f"--job-name={step_name(spec)}",
            "--export=ALL", f"--chdir={os.getcwd()}",
            sys.executable, "-m", torchrun, f"--nnodes={spec.nodes}", f"--nproc-per-node={per_node}",
            *rendezvous, f"--log-dir={os.path.join(spec.out_dir, 'torchrun')}", "-m", worker, spec_path]


def step_ids(name: str) -> list:
    """JOB.STEP ids of this allocation's steps called `name` (scancel --name matches jobs, not steps)."""
    if not in_allocation() or not shutil.which("squeue"):
        return []
    out = subprocess.run(["squeue", "--steps", "--noheader", "--format=%i %j", "--jobs", os.environ["SLURM_JOB_ID"]],
                         capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in out.splitlines() if len(line.split()) == 2 and line.split()[1] == name]


def cancel(spec) -> None:
    """End the configuration's step on every node: SIGTERM (torchrun passes it on), then SIGKILL."""
    ids = step_ids(step_name(spec))
    for sig, grace in (("TERM", CANCEL_GRACE_S), ("KILL", 0.0)):
        if not ids:
            return
        for step in ids:
            subprocess.run(["scancel", f"--signal={sig}", step], capture_output=True, timeout=30)
        deadline = time.monotonic() + grace
        while ids and time.monotonic() < deadline:
            time.sleep(0.2)
            ids = step_ids(step_name(spec))


# Run on every node by check_shared_folder: does the node see the token, and is the lock the sweep holds on it held
# there too? One line per node: '<host> held' (yes), 'taken' (the lock is per node), 'missing', 'error <errno> <why>'.
FLOCK_CHECK = r"""
import errno, fcntl, os, socket, sys
host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
try:
    fd = os.open(sys.argv[1], os.O_RDWR)
except OSError as e:
    print(host, "missing", e.strerror)
    sys.exit(0)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print(host, "held")
except OSError as e:
    print(host, "error", errno.errorcode.get(e.errno, e.errno), e.strerror)
else:
    print(host, "taken")
"""
LOCKS_NEEDED = ("torch's FileStores in the run folder (torchrun's rendezvous, every process group's init) lock their "
                "file with flock(2) on every node")


def mount_of(path: str, mounts: str = "/proc/mounts") -> str:
    """'TYPE at MOUNTPOINT (options OPTS)' of the filesystem holding `path`, '' where /proc/mounts cannot say."""
    best = ("", "", "")
    try:
        with open(mounts) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and (path + "/").startswith(parts[1].rstrip("/") + "/") and len(parts[1]) >= len(best[0]):
                    best = (parts[1], parts[2], parts[3])
    except OSError:
        return ""
    return f"{best[1]} at {best[0]} (options {best[2]})" if best[0] else ""


def _lock_advice(folder: str) -> str:
    where = mount_of(os.path.realpath(folder))
    return ((f"; the folder is on {where}" if where else "") + ". Mount it with flock across nodes (Lustre: -o flock; "
            "-o localflock locks within one node only and lets the rendezvous corrupt silently and hang to the timeout; "
            "NFS: without nolock or local_lock=flock), or put --store on a filesystem that has it")


def check_shared_folder(folder: str, nodes: int) -> None:
    """Every node must see the store's folder (results and heartbeats travel through it) and share its locks (the
    rendezvous and the process groups' init go through FileStores there): the sweep holds a flock on a token there
    while every node, through srun, opens it and tries the same lock. ConfigError if a node cannot see it, cannot lock
    it, or takes the lock the sweep holds (locks local to each node: Lustre's localflock)."""
    if nodes < 2:
        return
    os.makedirs(folder, exist_ok=True)
    fd, token = tempfile.mkstemp(prefix=".bench-shared-", dir=folder)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise ConfigError(f"the store's folder {folder!r} gives no file locks here ({e.strerror}): {LOCKS_NEEDED}"
                              + _lock_advice(folder)) from None
        try:
            proc = subprocess.run([*inherited_unsets(), "srun", f"--nodes={nodes}", f"--ntasks={nodes}",
                                   "--ntasks-per-node=1", *overlap(), "--immediate=60",
                                   "--job-name=bench-fscheck", sys.executable, "-c", FLOCK_CHECK, token],
                                  capture_output=True, text=True, timeout=SRUN_CHECK_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ConfigError(f"could not check that {nodes} nodes share {folder!r} (srun: {e})") from None
    finally:
        os.close(fd)
        os.unlink(token)
    answers = [line.split(None, 2) for line in proc.stdout.splitlines() if len(line.split()) >= 2]
    missing = [a[0] for a in answers if a[1] == "missing"]
    if missing:
        raise ConfigError(f"the store's folder {folder!r} is not visible from all {nodes} nodes of the allocation "
                          f"(node(s) {', '.join(missing)} cannot open it); multi-node results travel through the "
                          "filesystem the store lives on: put --store on a shared filesystem (e.g. your home or project folder)")
    if proc.returncode != 0 or len(answers) < nodes:
        # no node said the folder is missing: srun's own failure (a step that could not start, this Python or checkout
        # absent on another node) is the finding, not the store's place
        raise ConfigError(f"could not run a step on all {nodes} nodes to check that they share {folder!r} (srun exit "
                          f"{proc.returncode}, {len(answers)} of {nodes} node(s) answered: "
                          f"{proc.stderr.strip()[-300:] or 'no message'}); every multi-node configuration needs one: "
                          f"this Python ({sys.executable}) and checkout at the same paths on every node, and the "
                          "allocation's nodes free for a step")
    failed = [f"{a[0]} ({a[2] if len(a) > 2 else 'error'})" for a in answers if a[1] == "error"]
    if failed:
        raise ConfigError(f"the store's folder {folder!r} gives no file locks on node(s) {', '.join(failed)}: {LOCKS_NEEDED}"
                          + _lock_advice(folder))
    taken = [a[0] for a in answers if a[1] == "taken"]
    if taken:
        raise ConfigError(f"file locks on the store's folder {folder!r} are not shared across nodes: node(s) "
                          f"{', '.join(taken)} took the lock this node holds, as if it were free: {LOCKS_NEEDED}"
                          + _lock_advice(folder))
