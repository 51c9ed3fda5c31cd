"""Usage: cpu_seconds.py NAME -- COMMAND [ARG...]: run COMMAND, then print on stderr what it cost in CPU seconds,
user + system time of every process it started, its children's children included (`make test`'s last line).

The figure is the kernel's own count (getrusage of the reaped children). So that a process a test left behind is
counted too, this process is made the subreaper of everything under it (Linux): orphans are handed to it rather
than to init, and it reaps those that end before the command does. The load average beside the figure says how
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

_PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


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
    while True:  # orphans that ended with it
        try:
            done, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if done == 0:
            break
        orphans += usage.ru_utime + usage.ru_stime
    code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    return code, orphans


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
    print(
        f"{name}: {used.ru_utime + used.ru_stime:.1f} CPU-seconds (user {used.ru_utime:.1f} + system "
        f"{used.ru_stime:.1f}, every process it ran; {orphans:.1f} of them in processes whose parent ended first) "
        f"in {wall:.0f} s; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
