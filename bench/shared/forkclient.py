"""The process a launcher starts in place of `python -m MODULE ARGS` when a fork server runs (bench.shared.forkserver):

    python -I -S .../bench/shared/forkclient.py MODULE ARGS...      # $BENCH_FORKSERVER: the server's socket

Standard library only, run by path with -I -S (no site, no bench on the path): it starts in ~20 ms. It asks the server
for a child running MODULE with these arguments, its own folder, environment and standard streams, then stands for
that child: every signal it gets goes on to the child's process group, and it ends as the child ended (the same exit
status, or the same signal). It dies with its parent (PR_SET_PDEATHSIG), and the server kills the child when the
client is gone. Where no server answers it becomes `python -m MODULE ARGS` itself (exec), saying so on stderr.
"""
import array
import ctypes
import json
import os
import signal
import socket
import struct
import sys

ENV = "BENCH_FORKSERVER"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT, signal.SIGWINCH)
PID, STATUS = struct.Struct("!q"), struct.Struct("!i")


def fresh(argv: list, why: str) -> None:
    print(f"[forkclient] {why}: starting {argv[0]} as a fresh interpreter", file=sys.stderr, flush=True)
    env = {k: v for k, v in os.environ.items() if k != ENV}
    os.execve(sys.executable, [sys.executable, "-m", *argv], env)


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return b""
        out += chunk
    return out


def main(argv: list) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: go with the launcher
    except (OSError, AttributeError):
        pass
    path = os.environ.get(ENV)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path or "")
    except OSError as e:
        s.close()
        fresh(argv, f"no fork server at {path!r} ({e.strerror or e})")
    pending, child = [], [0]

    def forward(sig, _frame):
        if not child[0]:
            pending.append(sig)
            return
        for kill in (os.killpg, os.kill):
            try:
                kill(child[0], sig)
                return
            except (ProcessLookupError, PermissionError):
                continue

    for sig in FORWARDED:
        signal.signal(sig, forward)
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                       "title": ["-m", *argv]}).encode()
    s.sendmsg([struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    s.sendall(body)
    head = recv_exact(s, PID.size)
    if not head:
        print("[forkclient] the fork server closed the connection before starting the process", file=sys.stderr)
        os._exit(1)
    child[0] = PID.unpack(head)[0]
    for sig in pending:
        forward(sig, None)
    tail = recv_exact(s, STATUS.size)
    if not tail:
        print("[forkclient] the fork server went away before the process ended", file=sys.stderr)
        os._exit(1)
    status = STATUS.unpack(tail)[0]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python -I -S forkclient.py MODULE [ARGS...] (started by the sweep)", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1:])
