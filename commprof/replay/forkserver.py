"""A fork server: a clean process with torch pre-imported that forks one fresh worker per trial.

Every sweep point needs fresh processes (NCCL caches most of its variables per process), but starting Python
and importing torch costs 1.5-2 s. The server pays that once; each fork costs milliseconds. The server never
initialises CUDA, so each forked worker starts with a clean CUDA and NCCL state. Protocol: JSON lines on the
server's stdin / stdout; the controller kills a worker's whole process group itself on a timeout, and the
server ends whatever a worker left running (even in a session of its own) before it reports the worker's exit.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass

from commprof.records.folder import open_nofollow

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36


class ForkServerDied(RuntimeError):
    """The fork server ended while the controller still needed it."""


@dataclass
class WorkerExit:
    """How a worker ended: its exit code, or the signal that killed it."""

    pid: int
    exit_code: int | None
    signal: int | None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by signal {self.signal} ({signal.Signals(self.signal).name})"
        return f"exit code {self.exit_code}"


class ForkServer:
    """The controller's handle on its fork server process.

    Replies are read from the raw pipe with our own line buffer, so select() on it never misses a reply
    that a buffered reader had already pulled in.
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "commprof.replay.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self._fd = self.proc.stdout.fileno()
        self._buffer = b""
        if self._reply(timeout=None).get("ready") is not True:
            raise RuntimeError(f"fork server failed to start (exit {self.proc.poll()})")

    def launch(self, request_json: str, env: dict[str, str], log_path: str) -> int:
        """Fork a worker running the trial request with `env` applied; returns its pid (its own process group)."""
        line = json.dumps({"request": request_json, "env": env, "log": log_path}) + "\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        return int(self._reply(timeout=None)["pid"])

    def poll_exit(self, timeout: float) -> WorkerExit | None:
        """The last worker's exit if the server reports it within `timeout` seconds, else None."""
        reply = self._reply(timeout)
        return None if reply is None else WorkerExit(reply["pid"], reply.get("exit_code"), reply.get("signal"))

    def _reply(self, timeout: float | None) -> dict | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._fd], [], [], wait)[0]:
                return None
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise ForkServerDied(f"exit {self.proc.poll()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()  # reap it, so the server is gone when close() returns


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value)
    except (OSError, AttributeError):  # not Linux: orphans end by their own timeouts
        pass


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed controller leaves no orphan behind."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (zombies included), from /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()  # after "pid (comm)": state, ppid, ...
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def end_leftovers(worker_pid: int) -> None:
    """SIGKILL what a finished worker left running: its process group, then every process re-parented to this
    server, which is a child subreaper, so even a descendant that called setsid() ends with its point."""
    try:
        os.killpg(worker_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(1000):  # each round ends one generation; their children are re-parented here
        leftovers = _children(os.getpid())
        if not leftovers:
            return
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in leftovers:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _child(message: dict) -> None:
    """In the forked worker: own process group, output to the log, the point's environment, then the trial."""
    os.setsid()
    die_with_parent()
    for signum in (signal.SIGINT, signal.SIGTERM):  # the server ignores both; a worker is killed, not asked
        signal.signal(signum, signal.SIG_DFL)
    log = open_nofollow(message["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    os.environ.update(message["env"])
    code = 1
    try:
        from commprof.replay.trial import TrialRequest, worker_main

        code = worker_main(TrialRequest.from_json(message["request"]))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """Server loop: one request in, one worker forked, its pid out, then its exit status out."""
    import torch  # noqa: F401  (the point of the server: import once, fork many times)
    import torch.distributed  # noqa: F401

    import commprof.replay.harness  # noqa: F401
    import commprof.replay.trial  # noqa: F401

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        message = json.loads(line)
        out.flush()
        pid = os.fork()
        if pid == 0:
            _child(message)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        end_leftovers(pid)
        if os.WIFSIGNALED(status):
            reply = {"pid": pid, "exit_code": None, "signal": os.WTERMSIG(status)}
        else:
            reply = {"pid": pid, "exit_code": os.WEXITSTATUS(status), "signal": None}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    # The controller owns interrupts: a Ctrl-C in the terminal, or torchrun's SIGTERM to the controller's process
    # group when a peer dies, must not kill the server mid-report. It ends with its controller (stdin, pdeathsig).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a worker's descendants come here, to be ended with the point
    serve()
