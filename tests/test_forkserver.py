"""The fork server: forked from its controller where that is safe, a clean interpreter where it is not; a worker's
pid, then its exit, reported promptly, whether it ends at once or is killed."""

import os
import signal
import threading
import time

import pytest
import torch

from commprof.replay.forkserver import ForkServer

pytestmark = pytest.mark.processes


def test_instant_exit_and_kill_are_both_reported(tmp_path):
    server = ForkServer.start()
    try:
        assert server.forked  # this test's process has one Python thread and has not queried CUDA
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
    with pytest.raises(ChildProcessError):  # ended and reaped by close()
        os.waitpid(server.pid, os.WNOHANG)


def test_the_forked_server_keeps_none_of_the_controllers_files(tmp_path):
    """Only its two pipes (as stdin and stdout) and stderr: a file the controller holds open (its results, its
    store's socket, a test's captured output) must not stay open in the server or in the workers it forks."""
    with open(tmp_path / "held", "w"), ForkServer.start() as server:
        assert server.forked
        fds = {int(fd): os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.pid}/fd")}
    assert sorted(fds) == [0, 1, 2] and fds[0].startswith("pipe:") and fds[1].startswith("pipe:"), fds


def _run_a_bad_request(server: ForkServer, tmp_path) -> int | None:
    server.launch("not a trial request", {}, str(tmp_path / "w.log"))
    return server.poll_exit(None).exit_code


def test_beside_another_thread_the_server_is_a_clean_interpreter(tmp_path):
    """A fork would copy the other thread's held locks into the server: it starts from scratch instead."""
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with ForkServer.start() as server:
            assert not server.forked
            assert _run_a_bad_request(server, tmp_path) == 1
    finally:
        release.set()
        other.join()


def test_a_controller_that_queried_cuda_first_gets_a_clean_server(tmp_path, monkeypatch):
    """torch marks a process forked after it counted GPUs, and refuses CUDA there: the forked child sees the mark
    (torch.cuda._is_in_bad_fork, bound here against the installed torch) and a clean interpreter takes its place."""
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # raises if this torch lacks it
    with ForkServer.start() as server:
        assert not server.forked
        assert _run_a_bad_request(server, tmp_path) == 1


def _has_group(pid):
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
