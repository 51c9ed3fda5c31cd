"""One writer per run folder: the second is refused with the holder named; a dead holder stops nobody."""

import os
import socket
import subprocess
import sys

import pytest

from commprof.errors import UsageError
from commprof.sweep.running.run_lock import RunLock

HOLD = "import sys, time; from commprof.sweep.running.run_lock import RunLock; RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)"


@pytest.mark.processes
def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError) as refused:
            RunLock(tmp_path).acquire()
        message = str(refused.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path) as lock:  # the kernel dropped the dead holder's lock
        assert f"pid {os.getpid()}" in lock.holder()


def test_the_same_process_cannot_take_it_twice(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(UsageError, match="is being written by pid"):
            RunLock(tmp_path).acquire()


def test_report_warns_about_points_measured_twice(tmp_path):
    from commprof.report.command import load_run
    from tests.report_fixtures import make_records, write_run

    records = make_records("twice")
    run_dir = write_run(tmp_path, "twice", records=records + records[:3])
    *_, notes = load_run(run_dir)
    (note,) = notes
    assert "3 (point, T, mode) measured more than once" in note and "two sweeps wrote this run" in note
