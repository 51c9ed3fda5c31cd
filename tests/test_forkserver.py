"""The fork server: a worker's pid, then its exit, reported promptly, whether it ends at once or is killed."""

import os
import signal
import time

import pytest

from commprof.replay.forkserver import ForkServer

pytestmark = pytest.mark.processes


def test_instant_exit_and_kill_are_both_reported(tmp_path):
    server = ForkServer()
    try:
        log = tmp_path / "w.log"
        started = time.monotonic()
        pid = server.launch("not a trial request", {"COMMPROF_X": "1"}, str(log))
        exit_status = None
        while exit_status is None and time.monotonic() - started < 30:
            exit_status = server.poll_exit(0.02)
        assert exit_status is not None and exit_status.pid == pid
        assert exit_status.exit_code == 1 and not exit_status.ok
        assert "Traceback" in log.read_text()  # the worker's error went to its log, not to the controller

        # A worker still running when killed, whatever the machine's load: opening its log, a FIFO nobody
        # reads, blocks it before the trial (a bad request exits in milliseconds and could beat the kill).
        blocked_log = tmp_path / "blocked.log"
        os.mkfifo(blocked_log)
        pid = server.launch('{"run_id": 1}', {}, str(blocked_log))
        os.killpg(pid, signal.SIGKILL) if _has_group(pid) else os.kill(pid, signal.SIGKILL)
        killed = server.poll_exit(None)
        assert killed.signal == signal.SIGKILL and "SIGKILL" in killed.describe()
    finally:
        server.close()
    assert server.proc.poll() is not None


def _has_group(pid):
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
