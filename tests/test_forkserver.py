"""The fork server: forked from its controller where that is sound, a clean interpreter where it is not; a worker's
pid, then its exit, reported promptly, whether it ends at once or is killed."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from commprof.replay import forkserver
from commprof.replay.forkserver import ForkServer

pytestmark = pytest.mark.processes

# Run in a fresh interpreter, as a controller starts: nothing has loaded torch yet.
AS_A_CONTROLLER = textwrap.dedent(
    """
    import json, os, sys, threading
    from commprof.replay.forkserver import ForkServer, _can_fork

    seen = {}
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    seen["beside a thread"] = _can_fork()
    release.set()
    other.join()
    seen["fresh"] = _can_fork()
    with open(sys.argv[1], "w"), ForkServer.start() as server:  # a file the controller holds open
        seen["forked"] = server.forked
        seen["server's files"] = {fd: os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.pid}/fd")}
        server.launch("not a trial request", {}, sys.argv[1] + ".log")
        seen["bad request"] = server.poll_exit(None).exit_code
    seen["once torch is loaded"] = _can_fork()
    print(json.dumps(seen))
    """
)


def test_a_controller_forks_its_server_which_keeps_none_of_its_files(tmp_path):
    """Forked where the controller has loaded nothing and runs no other thread; the server holds only its two
    pipes (as stdin and stdout) and stderr: a file the controller holds open (its results, its store's socket, a
    test's captured output) stays open neither there nor in the workers it forks."""
    done = subprocess.run(
        [sys.executable, "-c", AS_A_CONTROLLER, str(tmp_path / "held")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["fresh"] and not seen["beside a thread"] and not seen["once torch is loaded"], seen
    assert seen["forked"] and seen["bad request"] == 1, seen
    files = seen["server's files"]
    assert sorted(files) == ["0", "1", "2"] and files["0"].startswith("pipe:") and files["1"].startswith("pipe:")


def test_instant_exit_and_kill_are_both_reported(tmp_path):
    server = ForkServer.start()
    try:
        assert not server.forked  # this process has used torch: its server is a clean interpreter
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


def test_a_controller_that_queried_cuda_first_gets_a_clean_server(tmp_path, monkeypatch):
    """torch marks a process forked after it counted GPUs, and refuses CUDA there: the forked child sees the mark
    (torch.cuda._is_in_bad_fork, bound here against the installed torch) and a clean interpreter takes its place."""
    monkeypatch.setattr(forkserver, "_can_fork", lambda: True)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # raises if this torch lacks it
    with ForkServer.start() as server:
        assert not server.forked
        server.launch("not a trial request", {}, str(tmp_path / "w.log"))
        assert server.poll_exit(None).exit_code == 1


def _has_group(pid):
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
