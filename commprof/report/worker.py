"""Parts of a report run in forked worker processes, so that a render uses a second core: the figures
(matplotlib's import while the records are read, then the drawing while the page is built: no other process of
a report imports matplotlib),
the nccl-tests tables' text and results.csv (report/write.py, while the run is decided and the other files
written); and the whole render in a process of its own (report/command.py), whose records the system frees at
once when it ends.

On Linux, in a process without other Python threads, a `Worker` forks: the child runs its jobs (inherited, never
pickled), then each call sent to it, and sends every result back pickled through a file, so a large one never
blocks it; the lines it `echo`es reach the terminal through the process that forked it, in order. Elsewhere each
job and call runs here when made. Either way `Pending.result()` returns the result or raises what the job raised;
a worker that dies, or stays silent for REPLY_TIMEOUT_S, raises WorkerError.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from functools import partial
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import click

from commprof.errors import RunStopped, UsageError
from commprof.report.views.drawing import FIGURES, drawn_by

# False: every job and call runs in this process (the tests' default: a forked worker is a process started).
FORK = True
# Longer than any one job of a large run takes (results.csv of 100,000 records: a few seconds).
REPLY_TIMEOUT_S = 600.0
# How long a stopped worker may take to clean up (an interruptible one removes its half-written report) before it
# is killed.
STOP_GRACE_S = 10.0
_STOPS = {signal.SIGINT, signal.SIGTERM}  # the signals that stop a worker (or interrupt an interruptible one)
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends
# In a forked worker: the connection to the process that forked it, which shows the lines `echo` sends.
_upstream: Connection | None = None
_held: list[Any] = []  # in a forked worker: what hold_until_exit keeps


def hold_until_exit(value: Any) -> None:
    """In a forked worker, keep `value` until the process ends, when the system takes back its memory at once (a
    large run's records took a tenth of the render to free one object at a time); here, nothing."""
    if _upstream is not None:
        _held.append(value)


def echo(message: str, err: bool = False) -> None:
    """click.echo from any process of a report: a worker sends the line up to the process that forked it."""
    if _upstream is None:
        click.echo(message, err=err)
    else:
        _upstream.send(("echo", message, err))


class WorkerError(RunStopped):
    """The worker process died, hung, or could not send a result back: one line, exit 1."""


def can_fork() -> bool:
    """Forking is safe here: Linux, and no other Python thread whose locks the child would inherit held."""
    return FORK and sys.platform == "linux" and hasattr(os, "fork") and threading.active_count() == 1


class Pending:
    """One job's or call's result, from the worker (or from this process, where nothing was forked)."""

    def __init__(self, worker: Worker, index: int):
        self._worker, self._index = worker, index

    def result(self) -> Any:
        ok, value = self._worker.outcome(self._index)
        if not ok:
            raise value
        return value


class Drawn(Pending):
    """A figure's SVG text, placed in the page as it is (matplotlib's SVG writer escapes its text); a template
    waits for it where it shows it."""

    def __html__(self) -> str:
        return self.result()

    def __str__(self) -> str:
        return self.result()


class Worker:
    """A forked child that runs `jobs` in order, then the calls sent with `call`, until closed (use it as a context
    manager: on an exception the child is killed). fork=False, or where forking is unsafe: all run here."""

    def __init__(self, *jobs: Callable[[], Any], fork: bool = True, interruptible: bool = False):
        """`interruptible`: Ctrl-C (or the stop of an exception here) raises KeyboardInterrupt in the child's jobs,
        so they clean up as they would here; else the child ignores Ctrl-C and is ended from here."""
        self._outcomes: dict[int, tuple[bool, Any]] = {}
        self._count = 0
        self._pid: int | None = None
        self._interruptible = interruptible
        if fork and can_fork():
            self._pid = self._start(jobs)
        if self._pid is None:
            for job in jobs:
                self._outcomes[len(self._outcomes)] = _outcome(job)
        self.jobs = [self._next(Pending) for _ in jobs]

    def _start(self, jobs: tuple[Callable[[], Any], ...]) -> int | None:
        """Fork the child (which never returns from here); its pid, or None where no folder, pipe or process could
        be had (then everything runs here)."""
        try:
            self._folder = Path(tempfile.mkdtemp(prefix="commprof-worker-"))
        except OSError:
            return None
        try:
            self._conn, child_end = Pipe()
        except OSError:
            shutil.rmtree(self._folder, ignore_errors=True)
            return None
        parent = os.getpid()
        # A stop arriving mid-fork waits until the child has its own handlers (it would run this process's).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            self._conn.close()
            child_end.close()
            shutil.rmtree(self._folder, ignore_errors=True)
            return None
        if pid == 0:
            self._conn.close()
            _serve(child_end, jobs, self._folder, self._interruptible, parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        child_end.close()
        return pid

    def _next(self, kind: type[Pending]) -> Pending:
        self._count += 1
        return kind(self, self._count - 1)

    def call(
        self, module: str, function: str, args: tuple = (), kwargs: dict | None = None, kind: type[Pending] = Pending
    ) -> Pending:
        """`module.function(*args, **kwargs)` run by the worker, or here if none was forked; its result as a `kind`.
        The call is pickled to a file, as results are: sending it never waits for the worker to end its last job."""
        call = (module, function, args, kwargs or {})
        if self._pid is None:
            self._outcomes[self._count] = _outcome(partial(_run, *call))
        else:
            with open(self._folder / f"call-{self._count}", "wb") as handle:
                pickle.dump(call, handle, protocol=pickle.HIGHEST_PROTOCOL)
            self._conn.send(self._count)
        return self._next(kind)

    def outcome(self, index: int) -> tuple[bool, Any]:
        """(True, result) or (False, exception) of job or call `index`, waiting for the worker to send it."""
        while index not in self._outcomes:
            if self._pid is None:
                raise WorkerError("the report's worker process was stopped before it sent this result")
            if not self._conn.poll(REPLY_TIMEOUT_S):
                self._stop(kill=True)
                raise WorkerError(f"the report's worker process sent nothing for {REPLY_TIMEOUT_S:g} s; stopped it")
            try:
                done = self._conn.recv()
            except EOFError:
                raise WorkerError(f"the report's worker process ended ({self._stop(kill=True)}) mid-way") from None
            if isinstance(done, tuple):  # a line the worker echoed
                echo(*done[1:])
                continue
            with open(self._folder / str(done), "rb") as handle:
                self._outcomes[done] = pickle.load(handle)
        return self._outcomes[index]

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, kind, value, trace) -> None:
        status = self._stop(kill=kind is not None)
        if kind is None and status != "exit status 0":
            raise WorkerError(f"the report's worker process ended with {status}")

    def _stop(self, kill: bool) -> str:
        """End the child (asked to, or terminated: it has STOP_GRACE_S to clean up before it is killed) and reap
        it; how it ended."""
        if self._pid is None:
            return "exit status 0"
        pid, self._pid = self._pid, None
        with contextlib.suppress(OSError):
            if kill:
                os.kill(pid, signal.SIGTERM)
            else:
                self._conn.send(None)
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        self._conn.close()
        shutil.rmtree(self._folder, ignore_errors=True)
        return f"exit status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"signal {os.WTERMSIG(status)}"


def _run(module: str, function: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    return getattr(importlib.import_module(module), function)(*args, **kwargs)


def _outcome(job: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, job()
    except Exception as exc:
        return False, exc


def _serve(
    conn: Connection, jobs: tuple[Callable[[], Any], ...], folder: Path, interruptible: bool, parent: int
) -> None:
    """The child's life: each job, then each call until told to stop (None) or the parent is gone; never returns."""
    global _upstream
    _upstream = conn
    if interruptible:  # Ctrl-C (unless ignored, as the parent does), or the parent's SIGTERM, interrupts the job,
        # once: its clean-up is not cut short
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
    else:  # Ctrl-C stops the parent, which ends this child
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _end_with(parent)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)  # what arrived meanwhile is handled as set above
    code = 0
    try:
        for index, job in enumerate(jobs):
            _send(conn, folder, index, _outcome(job))
        while (index := conn.recv()) is not None:
            with open(folder / f"call-{index}", "rb") as handle:
                call = pickle.load(handle)
            _send(conn, folder, index, _outcome(partial(_run, *call)))
    except (EOFError, BrokenPipeError):  # the parent is gone
        code = 1
    except KeyboardInterrupt:  # the parent stops too, and says so
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 2
    finally:
        os._exit(code)


def _end_with(parent: int) -> None:
    """Have Linux send this process SIGTERM when `parent` ends (killed, say), as if it had stopped it: a render
    never goes on, or leaves its half-written report, after the command that started it is gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux's C library: the parent's pipe ending stops it instead
        return
    if os.getppid() != parent:  # gone before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def _interrupt(signum: int, frame: Any) -> None:
    for each in (signal.SIGINT, signal.SIGTERM):  # a second signal (Ctrl-C, then the parent's stop) is let be
        if signal.getsignal(each) is _interrupt:
            signal.signal(each, _let_be)
    raise KeyboardInterrupt


def _let_be(signum: int, frame: Any) -> None:
    """A signal that arrives while an interrupted job cleans up."""


def _send(conn: Connection, folder: Path, index: int, outcome: tuple[bool, Any]) -> None:
    ok, value = outcome
    if not ok and not isinstance(value, (UsageError, OSError)):  # those say all in one line; a bug needs its trace
        value.add_note("(raised in the report's worker process)\n" + "".join(traceback.format_tb(value.__traceback__)))
    try:
        data = pickle.dumps((ok, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        data = pickle.dumps((False, WorkerError(f"cannot send back {type(value).__name__}: {exc}")))
    with open(folder / str(index), "wb") as handle:
        handle.write(data)
    conn.send(index)


@contextlib.contextmanager
def figure_worker() -> Iterator[None]:
    """For the block, the page's figures (views/drawing.py) are drawn by a worker forked now, which imports
    matplotlib while this process goes on."""
    with Worker(_import_figures) as worker, drawn_by(partial(_draw, worker)):
        yield


def _import_figures() -> None:
    importlib.import_module(FIGURES)


def _draw(worker: Worker, module: str, function: str, args: tuple, kwargs: dict[str, Any]) -> Drawn:
    return worker.call(module, function, args, kwargs, Drawn)
