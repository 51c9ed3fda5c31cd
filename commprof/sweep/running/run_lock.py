"""One writer per run folder: an advisory lock held by the sweep controller that writes it, for the run's life.

Two controllers appending to one results.jsonl (a `--resume` of a run that is still going) would measure the
same points twice, on a shared box, and mix their timings. The lock file names its holder (pid, host, since
when), so the second writer is refused with a line that says who to wait for. The kernel drops the lock when
its holder dies, however it dies; a lock file left behind by a dead holder stops nobody.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from commprof.errors import UsageError
from commprof.records.folder import open_nofollow

LOCK_FILE = "writer.lock"


class RunLock:
    """flock(2) on <run>/writer.lock; `holder` is what the file says about whoever holds it."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise UsageError naming the live holder."""
        try:
            fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise UsageError(f"cannot lock the run folder {self.path.parent}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"{self.path.parent} is being written by {self.holder()}: one sweep writes a run at a time; "
                "wait for it to end (or stop it) before resuming"
            ) from None
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        self._fd = fd

    def holder(self) -> str:
        """ "pid 123 on host h (since ...)" from the lock file, as far as it can be read."""
        try:
            info = json.loads(self.path.read_text(encoding="utf-8"))
            return f"pid {info['pid']} on host {info['host']} (since {info['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process (it has not yet written its name)"

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
