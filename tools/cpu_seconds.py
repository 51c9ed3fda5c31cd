"""Usage: cpu_seconds.py NAME -- COMMAND [ARG...]: run COMMAND, then print on stderr what it cost in CPU seconds,
user + system time of every process it started, its children's children included (`make test`'s last line).

The figure is the kernel's own count (getrusage of the reaped children). So that a process a test left behind is
counted too, this process is made the subreaper of everything under it (Linux): orphans are handed to it rather
than to init, and it reaps them, waiting up to ORPHAN_GRACE_S for those still running when the command ends (a fork
server ends once the process that used it has); any left then are said, not counted. The load average beside the figure says how
busy the machine was: CPU seconds grow a little on a loaded machine (shared caches), far less than wall time does.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
ORPHAN_GRACE_S = 15.0  # how long orphans still running when the command ends are waited for


def _become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: orphans go to init, uncounted


def _wait_reaping(pid: int) -> tuple[int, float]:
    """Wait for `pid`, reaping every orphan handed over meanwhile: its exit status as a shell gives it, and the CPU
    seconds of the orphans (their own and their reaped children's)."""
    orphans = 0.0
    while True:
        try:
            done, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return 1, orphans
        if done == pid:
            break
        orphans += usage.ru_utime + usage.ru_stime
    code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    return code, orphans + _reap_the_rest(time.monotonic() + ORPHAN_GRACE_S)


def _reap_the_rest(deadline: float) -> float:
    """Reap the orphans that end before `deadline` (a fork server ends once the process that used it has), and
    their CPU seconds."""
    orphans = 0.0
    while time.monotonic() < deadline:
        try:
            done, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            break
        if done == 0:
            time.sleep(0.05)
            continue
        orphans += usage.ru_utime + usage.ru_stime
    return orphans


def _still_running() -> int:
    """How many orphans handed to this process are still running (their CPU uncounted)."""
    me, count = str(os.getpid()), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == me:
                count += 1
        except (OSError, IndexError):
            pass
    return count


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    name, command = argv[0], argv[2:]
    _become_subreaper()
    load_before, started = os.getloadavg()[0], time.monotonic()
    child = subprocess.Popen(command)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the command, which ends; this one then reports
    code, orphans = _wait_reaping(child.pid)
    child.returncode = code  # reaped above: Popen must not wait for it again
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - started
    running = _still_running()
    print(
        f"{name}: {used.ru_utime + used.ru_stime:.1f} CPU-seconds (user {used.ru_utime:.1f} + system "
        f"{used.ru_stime:.1f}, every process it ran; {orphans:.1f} of them in processes whose parent ended first"
        f"{f', {running} still running and not counted' if running else ''}) in {wall:.0f} s; load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
