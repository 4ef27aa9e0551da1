"""A fork server: one process that has imported torch (and the suite) once, and forks a fresh child for every
process a sweep starts on this node, so that no rank pays the ~1.5-2 s of CPU a new Python spends importing torch.

    server = start(PRELOAD_RANK)          # in the sweep: a server of its own (or the one BENCH_FORKSERVER names)
    env[ENV] = server.path                # what every launched process is told
    [sys.executable, "-I", "-S", CLIENT, "bench.rank.worker", SPEC]   # instead of `python -m bench.rank.worker SPEC`
    server.close()

The launched process is bench/shared/forkclient.py, a stdlib-only script that starts in ~20 ms: it hands the server
its command (a module and its arguments), folder, environment and standard streams (the file descriptors themselves,
over the Unix socket), and the server forks a child that runs the module as `python -m` would, in a session of its
own, with that folder, environment and those streams. The client stays as the process its launcher knows: it passes
on every signal it gets to the child's process group, and ends as the child ended (its exit status, or the same
signal). The child's command line and environment as /proc shows them are rewritten to the client's, so that a
configuration's processes are still found by the spec file they name (bench.shared.procs.worker_pids); if the client
dies (SIGKILL
included), the server kills the child's group; if the server dies, its children die with it (PR_SET_PDEATHSIG).

What a child shares with its siblings, and a fresh interpreter does not: the imported modules' state as the server left
it (no device touched, no computation run: CUDA, OpenMP and the allocator start in the child), the address-space
layout, and Python's string-hash seed. torch's and numpy's random generators are reseeded from the OS in every child,
as a new interpreter seeds them (the suite seeds what it measures itself). The server holds no thread but its main one:
it starts with OPENBLAS_NUM_THREADS=1 (importing numpy would otherwise start OpenBLAS's pool; numpy's BLAS then runs
on one thread in every child, and the suite times nothing of numpy's), and it refuses to serve (every process then
starts fresh, and the sweep says so) if importing started any thread.

The server listens on a Unix socket in a folder only its user can enter: nothing listens on a network interface.
"""
from __future__ import annotations

import array
import atexit
import ctypes
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Optional

ENV = "BENCH_FORKSERVER"                  # the server's socket, in every launched process's environment
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forkclient.py")
PRELOAD_RANK = ("torch", "torch.distributed", "torchvision", "bench.rank.worker")   # what a rank imports anyway
PRELOAD_CLI = PRELOAD_RANK + ("bench.cli", "bench.sweep.run")                     # and what a sweep imports
START_TIMEOUT_S = 60.0
TITLE_ROOM = 4096                         # bytes of the server's own command line a child's command line may fill
ENV_ROOM = 65536                          # and of its environment, for the child's
HEADER = struct.Struct("!I")              # a request: its JSON's length, then the JSON, with the 3 streams' fds
PID = struct.Struct("!q")                 # the reply: the child's pid, then (when it ends) its wait status
STATUS = struct.Struct("!i")
_FORKED = [False]                         # set in a child of the server (`started_as`)


def started_as() -> str:
    """How this process began: 'forked' from a fork server, else 'fresh' (a new interpreter)."""
    return "forked" if _FORKED[0] else "fresh"


class Server:
    """A running fork server as its starter sees it (`start`): its socket path; `close()` ends it."""

    def __init__(self, path: str, proc: Optional[subprocess.Popen], folder: Optional[str]):
        self.path, self.proc, self.folder = path, proc, folder

    def ready(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Wait until the server answers (True), or it ended or the time ran out (False: closed, its reason printed)."""
        deadline = time.monotonic() + timeout_s
        while self.proc is None or self.proc.poll() is None:
            if reachable(self.path):
                return True
            if self.proc is None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        why = "no answer within %.0f s" % timeout_s
        if self.folder:
            try:
                with open(os.path.join(self.folder, "stderr")) as f:
                    why = (f.read().strip().splitlines() or [why])[-1]
            except OSError:
                pass
        print(f"[forkserver] not started ({why}); every process starts as a fresh interpreter", file=sys.stderr)
        self.close()
        return False

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.folder and os.path.isdir(self.folder):
            for name in os.listdir(self.folder):
                try:
                    os.unlink(os.path.join(self.folder, name))
                except OSError:
                    pass
            try:
                os.rmdir(self.folder)
            except OSError:
                pass
        self.folder = None
        self.proc = None


def reachable(path: Optional[str]) -> bool:
    """Whether a server answers at `path` (a connection it accepts and drops costs it nothing)."""
    if not path:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def start(preload: tuple = PRELOAD_RANK, timeout_s: float = START_TIMEOUT_S) -> Optional[Server]:
    """The server named by $BENCH_FORKSERVER if one answers there (a test session's, or the sweep this process was
    forked for), else a new one, started now and ready when this returns; None where none could be started (its reason
    printed): then every process starts as a fresh interpreter."""
    given = os.environ.get(ENV)
    if reachable(given):
        return Server(given, None, None)
    server = launch(preload)
    return server if server.ready(timeout_s) else None


def launch(preload: tuple) -> Server:
    """A new server, starting (it imports `preload` first: `Server.ready` waits for it)."""
    folder = tempfile.mkdtemp(prefix="bench-forkserver-")  # 0700: only this user reaches the socket
    path = os.path.join(folder, "socket")
    from bench.shared import procs  # the server dies with its starter
    with open(os.path.join(folder, "stderr"), "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "bench.shared.forkserver", path, ",".join(preload), " " * TITLE_ROOM],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                preexec_fn=procs.child_setup,
                                env={**{k: v for k, v in os.environ.items() if k != ENV}, "OPENBLAS_NUM_THREADS": "1",
                                     "BENCH_FORKSERVER_ROOM": " " * ENV_ROOM})
    server = Server(path, proc, folder)
    atexit.register(server.close)
    return server


# ---------------------------------------------------------------- the server process

def serve(path: str, preload: list) -> None:
    for name in preload:
        importlib.import_module(name)
    stray = _stray_threads()
    if stray:
        raise SystemExit(f"importing {', '.join(preload)} started threads a fork would not carry: {', '.join(stray)}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    os.rename(path + ".new", path)      # reachable only once it listens
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    children: dict = {}                 # pid -> the client's connection
    try:
        while True:
            conns = {c.fileno(): (pid, c) for pid, c in children.items()}
            ready, _, _ = select.select([listener, wake_r, *conns], [], [])
            for r in ready:
                if r is listener:
                    _accept(listener, children, wake_r, wake_w)
                elif r == wake_r:
                    os.read(wake_r, 4096)
                    _reap(children)
                else:                   # a client spoke or went away: only going away is possible
                    pid, conn = conns[r]
                    if pid in children and not _peek(conn):
                        _kill_group(pid)
            _reap(children)
    finally:
        for pid in list(children):
            _kill_group(pid)


def _accept(listener: socket.socket, children: dict, *close_in_child: int) -> None:
    conn, _ = listener.accept()
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError):
        conn.close()                    # a probe (`reachable`) or a client that died mid-request
        return
    if request is None:
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            listener.close()
            for c in children.values():
                c.close()
            for fd in close_in_child:
                os.close(fd)
            conn.close()
            code = _child(request, fds)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            _flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.sendall(PID.pack(pid))


def _receive(conn: socket.socket) -> tuple:
    conn.settimeout(10)
    head, fds = _recv_fds(conn, HEADER.size, 3)
    if not head:
        return None, []
    (size,) = HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("short request")
        body += chunk
    conn.settimeout(None)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request carries the three standard streams")
    return json.loads(body), fds


def _recv_fds(conn: socket.socket, size: int, maxfds: int) -> tuple:
    fds = array.array("i")
    msg, anc, _, _ = conn.recvmsg(size, socket.CMSG_LEN(maxfds * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    return msg, list(fds)


def _peek(conn: socket.socket) -> bool:
    """False once the client has gone (end of file)."""
    try:
        return bool(conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return True
    except OSError:
        return False


def _reap(children: dict) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(STATUS.pack(status))
            except OSError:
                pass
            conn.close()


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
            return
        except (ProcessLookupError, PermissionError):
            continue


def _stray_threads() -> list:
    """The threads of this process besides the main one, by their names."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                continue
    return names


# ---------------------------------------------------------------- a child

def _child(request: dict, fds: list) -> int:
    """Become the process the client asked for, then run its module as `python -m` does."""
    os.setsid()                         # its own session and group, as every launched process has
    _FORKED[0] = True
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    _die_with_parent()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    argv = [str(a) for a in request["argv"]]
    _set_proc(request.get("title") or argv, request["env"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1 if unbuffered or os.isatty(1) else -1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.path[0] = request["cwd"]        # as `python -m` puts the current folder first
    _reseed()
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))   # a new interpreter's OpenMP would read it at start
    module, args = argv[0], argv[1:]
    sys.argv = [module, *args]
    import runpy
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr) or 1))
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code


def _reseed() -> None:
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def _die_with_parent() -> None:
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _set_proc(argv: list, env: dict) -> None:
    """Write `argv` and `env` over this process's own command line and environment as the kernel shows them
    (/proc/PID/cmdline and /proc/PID/environ: the server's, started with room to spare), so that what inspects
    processes (bench.shared.procs.worker_pids, ps, a test) sees what the child runs and with what; cut to the room."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        arg, env_area = (int(fields[45]), int(fields[46])), (int(fields[47]), int(fields[48]))  # fields 48-51 of proc(5)
    except (OSError, IndexError, ValueError):
        return
    for (start, end), items in ((arg, [sys.executable, *argv]), (env_area, [f"{k}={v}" for k, v in env.items()])):
        data = b"\0".join(a.encode(errors="replace") for a in items)[:end - start - 1]
        ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":  # run as the module itself, not as __main__: a child's `started_as` reads its state
    from bench.shared import forkserver
    forkserver.serve(sys.argv[1], [m for m in sys.argv[2].split(",") if m])
