"""A fork server: a process with torch imported that forks one fresh worker per trial.

Every sweep point needs fresh processes (NCCL caches most of its variables per process), but starting Python
and importing torch costs 1.5-2 s. The controller has imported torch already, so its server is forked from it
before it queries CUDA (a process forked after torch has counted GPUs cannot use CUDA): a server costs a fork.
Where forking is unsafe (other Python threads, not Linux) or the fork finds CUDA already queried, the server is
a clean interpreter that imports torch itself. The server never initialises CUDA, so each forked worker starts
with a clean CUDA and NCCL state. Protocol: JSON lines, requests in and replies out through two pipes; the
controller kills a worker's whole process group itself on a timeout, and the server ends whatever a worker left
running (even in a session of its own) before it reports the worker's exit.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import threading
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
    """The controller's handle on its fork server process: its pid and the two pipes.

    Replies are read from the raw pipe with our own line buffer, so select() on it never misses a reply
    that a buffered reader had already pulled in.
    """

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self._requests = requests
        self._fd = replies
        self._buffer = b""
        self._status: int | None = None
        ready = self._reply(timeout=None)
        if ready.get("ready") is not True:
            raise RuntimeError(f"fork server failed to start ({self._ended()})")
        self.forked = bool(ready.get("forked"))  # False: a clean interpreter that imported torch itself

    @classmethod
    def start(cls) -> ForkServer:
        """A server forked from this process where that is safe (_can_fork), else a clean one; call it before
        anything here loads torch or queries CUDA. Imports here what the server would (torch, the harness): the
        controller needs them anyway."""
        fork = _can_fork()
        for name in PRELOAD:
            importlib.import_module(name)
        requests_read, requests = os.pipe()
        replies, replies_write = os.pipe()
        try:
            if fork:
                # A stop arriving mid-fork waits until the child ignores it (it would run the controller's handler).
                held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
                try:
                    pid = os.fork()
                    if pid == 0:
                        _forked_server(requests_read, replies_write, held)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, held)
            else:
                pid = _spawn_clean(requests_read, replies_write)
        except OSError:
            os.close(requests)
            os.close(replies)
            raise
        finally:
            os.close(requests_read)
            os.close(replies_write)
        return cls(pid, requests, replies)

    def launch(self, request_json: str, env: dict[str, str], log_path: str) -> int:
        """Fork a worker running the trial request with `env` applied; returns its pid (its own process group)."""
        line = json.dumps({"request": request_json, "env": env, "log": log_path}) + "\n"
        try:
            os.write(self._requests, line.encode())  # one line is far below a pipe's atomic write size
        except BrokenPipeError:
            raise ForkServerDied(self._ended()) from None
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
                raise ForkServerDied(self._ended())
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _ended(self, wait_s: float = 1.0) -> str:
        """How the server ended (waiting up to `wait_s` for it), in words."""
        deadline = time.monotonic() + wait_s
        while self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status = status
            elif time.monotonic() >= deadline:
                return "still running"
            else:
                time.sleep(0.01)
        if os.WIFSIGNALED(self._status):
            return f"killed by signal {os.WTERMSIG(self._status)}"
        return f"exit {os.WEXITSTATUS(self._status)}"

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """End the server (its requests pipe closed, it stops; killed after 5 s) and reap it."""
        if self._requests >= 0:
            os.close(self._requests)
            self._requests = -1
        if self._ended(wait_s=5.0) == "still running":
            os.kill(self.pid, signal.SIGKILL)
            self._ended(wait_s=60.0)
        os.close(self._fd)


def _can_fork() -> bool:
    """Forking this process gives a sound server: Linux, no other Python thread, and torch not loaded yet, so no
    thread of torch's compute (OpenMP's pool, gloo's) or CUDA query has left state a forked child cannot use (its
    first parallel op would hang). The controller starts its server first thing, so it forks; a process that has
    used torch already (a test's) gets a clean server."""
    return sys.platform == "linux" and threading.active_count() == 1 and "torch" not in sys.modules


# What a server has imported before its first fork: torch and the modules every trial uses.
PRELOAD = ("torch", "torch.distributed", "commprof.replay.harness", "commprof.replay.trial")
CLEAN_SERVER = [sys.executable, "-m", "commprof.replay.forkserver"]
MAX_FD = 1 << 20  # above any descriptor a process holds (closerange closes what is open below it)


def _forked_server(requests: int, replies: int, signal_mask: set) -> None:
    """In the child forked from the controller: the server on its two pipes (as stdin and stdout, the rest of the
    controller's files closed), unless the controller had already queried CUDA (torch then forbids CUDA here and
    in every worker): then a clean interpreter takes this process's place."""
    code = 1
    try:
        _become_server()
        signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
        os.dup2(requests, 0)
        os.dup2(replies, 1)
        os.closerange(3, MAX_FD)
        import torch

        if torch.cuda._is_in_bad_fork():
            os.execv(sys.executable, CLEAN_SERVER)
        serve(forked=True)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)  # never back into the controller's code, its atexit handlers or its buffered output


def _spawn_clean(requests: int, replies: int) -> int:
    """A server in a fresh interpreter (safe from a process with threads), on the two pipe ends; its pid."""
    actions = [(os.POSIX_SPAWN_DUP2, requests, 0), (os.POSIX_SPAWN_DUP2, replies, 1)]
    return os.posix_spawn(sys.executable, CLEAN_SERVER, os.environ, file_actions=actions)


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


def serve(forked: bool) -> None:
    """Server loop on stdin and stdout: one request in, one worker forked, its pid out, then its exit status out."""
    for name in PRELOAD:  # the point of the server: import once, fork many times
        importlib.import_module(name)

    def reply(message: dict) -> None:
        os.write(1, (json.dumps(message) + "\n").encode())  # a line is far below a pipe's atomic write size

    reply({"ready": True, "forked": forked})
    for line in os.fdopen(0, "rb", closefd=False):
        message = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(message)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        end_leftovers(pid)
        if os.WIFSIGNALED(status):
            reply({"pid": pid, "exit_code": None, "signal": os.WTERMSIG(status)})
        else:
            reply({"pid": pid, "exit_code": os.WEXITSTATUS(status), "signal": None})


def _become_server() -> None:
    """A server's own settings, whichever way it started. The controller owns interrupts: a Ctrl-C in the
    terminal, or torchrun's SIGTERM to the controller's process group when a peer dies, must not kill the server
    mid-report. It ends with its controller (its requests pipe closed, pdeathsig), and adopts the orphans of a
    worker's descendants, to end them with the point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


if __name__ == "__main__":  # a clean server
    _become_server()
    serve(forked=False)
