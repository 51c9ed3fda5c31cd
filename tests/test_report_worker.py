"""The report's worker process (report/worker.py): results and errors come back as if run here, a dead or silent
worker fails the report in one line, and a report rendered with workers is the one rendered without."""

import errno
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.report import worker
from commprof.report.worker import Worker, WorkerError
from tests.report_fixtures import write_run

pytestmark = pytest.mark.processes


@pytest.fixture
def forking(monkeypatch):
    monkeypatch.setattr(worker, "FORK", True)


def _refuse():
    raise UsageError("results.jsonl: line 3: point: missing (allowed: ...)")


@pytest.mark.parametrize("fork", [True, False])
def test_jobs_and_calls_come_back_in_order_and_errors_as_raised(monkeypatch, fork):
    monkeypatch.setattr(worker, "FORK", fork)
    with Worker(lambda: os.getpid(), _refuse) as work:
        pid, refused = work.jobs
        joined = work.call("os.path", "join", ("a", "b"))
        assert joined.result() == "a/b"
        assert (pid.result() != os.getpid()) is fork
        with pytest.raises(UsageError, match=r"^results.jsonl: line 3: point: missing \(allowed: ...\)$"):
            refused.result()


def test_a_worker_that_dies_or_hangs_fails_and_is_reaped(forking, monkeypatch):
    with pytest.raises(WorkerError, match=r"ended \(exit status 3\) mid-way"):
        with Worker(lambda: os._exit(3)) as work:
            work.jobs[0].result()
    monkeypatch.setattr(worker, "REPLY_TIMEOUT_S", 0.3)
    started = time.monotonic()
    with pytest.raises(WorkerError, match="sent nothing for 0.3 s"):
        with Worker(lambda: time.sleep(60)) as work:
            pid = work.call("os", "getppid")  # queued behind the sleeping job
            pid.result()
    assert time.monotonic() - started < 10


def _runs(root: Path) -> list[Path]:
    return [write_run(root / "runs", "one"), write_run(root / "runs", "two", seed=5)]


@pytest.mark.parametrize("count", [1, 2])
def test_a_report_with_workers_is_the_report_without(tmp_path, monkeypatch, count):
    runs = [str(r) for r in _runs(tmp_path)[:count]]
    rendered = {}
    for fork in (True, False):  # the worker first: it draws from this process's figure count, as this one then does
        monkeypatch.setattr(worker, "FORK", fork)
        out = tmp_path / f"out-{fork}"
        assert main(["report", *runs, "--out", str(out), "--compute-ms", "5.0"]) == 0
        rendered[fork] = {
            # the minute it was rendered, on the page and in summary.json ("generated": "... UTC")
            p.relative_to(out): re.sub(r'generated(?:": ")? ?[^<"]*UTC', "", p.read_text())
            for p in sorted(out.rglob("*"))
            if p.is_file()
        }
    assert rendered[True] == rendered[False]
    assert rendered[True][Path("index.html")].count("<svg") >= 4


def test_an_error_in_the_worker_fails_the_report_as_it_would_here(tmp_path, forking, monkeypatch, capsys):
    run = _runs(tmp_path)[0]

    def full(*_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("commprof.report.write.results_csv", full)
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().endswith("cannot write the report (No space left on device)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing half-written left

    monkeypatch.undo()
    monkeypatch.setattr(worker, "FORK", True)
    monkeypatch.setattr("commprof.report.views.figures.sites_svg", lambda *_: os._exit(9))
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("commprof: error: the report's worker process ended (exit status 9)") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_where_no_process_can_be_forked_everything_runs_here(forking, monkeypatch):
    def refused():
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    monkeypatch.setattr(os, "fork", refused)
    with Worker(lambda: os.getpid()) as work:
        assert work.jobs[0].result() == os.getpid()
        assert work.call("os.path", "join", ("a", "b")).result() == "a/b"


def _echo_through_a_worker_of_its_own():
    worker.echo("from the worker's worker", err=True)
    return "inner"


def _echo_lines():
    worker.echo("first")
    worker.echo("second", err=True)
    with Worker(_echo_through_a_worker_of_its_own) as inner:
        inner_result = inner.jobs[0].result()
    worker.echo("third")
    return os.getpid(), inner_result


def test_lines_a_worker_echoes_reach_this_terminal_in_order(forking, capsys):
    with Worker(_echo_lines) as work:
        pid, inner = work.jobs[0].result()
    assert pid != os.getpid() and inner == "inner"
    captured = capsys.readouterr()
    assert captured.out == "first\nthird\n"
    assert captured.err == "second\nfrom the worker's worker\n"


def test_an_interrupted_worker_cleans_up_before_it_ends(forking, tmp_path):
    half_written = tmp_path / "half-written"

    def render():
        half_written.mkdir()
        try:
            time.sleep(60)
        finally:
            half_written.rmdir()  # what a report does with its staging folder

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with Worker(render, interruptible=True):
            while not half_written.exists():
                time.sleep(0.01)
            raise KeyboardInterrupt  # Ctrl-C here: the worker is stopped, and cleans up first
    assert not half_written.exists()
    assert time.monotonic() - started < worker.STOP_GRACE_S


_ORPHANED = """
import sys, time
from pathlib import Path
from commprof.report.worker import Worker

half_written = Path(sys.argv[1])

def render():
    half_written.mkdir()
    try:
        time.sleep(60)
    finally:
        half_written.rmdir()

with Worker(render, interruptible=True) as work:
    work.jobs[0].result()
"""


def test_a_worker_whose_parent_is_killed_cleans_up_and_ends(tmp_path):
    half_written = tmp_path / "half-written"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    parent = subprocess.Popen([sys.executable, "-c", _ORPHANED, str(half_written)], env=env)
    try:
        deadline = time.monotonic() + 30
        while not half_written.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert half_written.exists()
    finally:
        parent.kill()  # SIGKILL: the parent says nothing to its worker
        parent.wait()
    deadline = time.monotonic() + worker.STOP_GRACE_S
    while half_written.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not half_written.exists()


def _refuse_at_once():
    with Worker(lambda: None):  # stopped while it may still be starting: the error below ends this block
        raise UsageError("--observed-step-ms: '1e308' must be a number of milliseconds above 0")


def test_a_worker_stopped_as_it_starts_ends_quietly(forking, monkeypatch, capfd):
    """A worker that loses its stop waits out STOP_GRACE_S and is then killed with SIGKILL, the one way `_stop`
    kills: each stop, here and in the worker's own worker, is checked for it (not timed: a busy box slows 30 forks
    far more than it delays a stop)."""
    stop = Worker._stop

    def checked(self, kill):
        status = stop(self, kill)
        assert status != f"signal {signal.SIGKILL}", "a worker lost its stop, waited out its grace and was killed"
        return status

    monkeypatch.setattr(Worker, "_stop", checked)
    for _ in range(30):
        with pytest.raises(UsageError):
            with Worker(_refuse_at_once, interruptible=True) as work:
                work.jobs[0].result()
    assert "Traceback" not in capfd.readouterr().err
