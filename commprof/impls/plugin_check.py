"""Import a plug-in in a throwaway child process before the controller imports it.

A plug-in's module runs its own code at import: one that calls sys.exit() or os.abort() there would end the
sweep controller silently, one that loops would hang it. The child takes that blow and the controller reports it
in one line; only a plug-in that imports cleanly in the child is then imported by the controller itself.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from commprof.errors import UsageError

IMPORT_LIMIT_S = 120.0  # a plug-in that imports torch or a kernel library can take a while on a busy machine


def check_plugin_import(name: str, limit_s: float = IMPORT_LIMIT_S) -> None:
    """UsageError naming `name` when importing it (registry.load_impl) in a forked child does not end well.

    torch is imported here first, so the child inherits it: a plug-in's import is mostly torch's (a second or two
    of CPU), which the controller pays next anyway, and would otherwise pay twice per plug-in and rank."""
    import torch  # noqa: F401

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: import, say how it went, and leave without running the parent's cleanup
        os.close(read_end)
        verdict = {"ok": True}
        try:
            from commprof.impls.registry import load_impl

            load_impl(name)
        except UsageError as exc:
            verdict = {"ok": False, "problem": str(exc)}
        except SystemExit as exc:
            verdict = {"ok": False, "problem": f"implementation {name!r}: importing it called sys.exit({exc.code!r})"}
        except BaseException as exc:  # the child reports whatever it was, then exits
            verdict = {"ok": False, "problem": f"implementation {name!r}: importing it raised {type(exc).__name__}"}
        os.write(write_end, json.dumps(verdict).encode())
        os._exit(0)
    os.close(write_end)
    try:
        data = _read_all(read_end, time.monotonic() + limit_s)
    finally:
        os.close(read_end)
    if data is None:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if data is None:
        raise UsageError(f"implementation {name!r}: importing it did not finish within {limit_s:g} s")
    if not data:  # the child ended before it could say anything: os.abort(), os._exit(), a signal
        how = (
            f"killed it with signal {signal.Signals(os.WTERMSIG(status)).name}"
            if os.WIFSIGNALED(status)
            else f"ended the process (exit code {os.WEXITSTATUS(status)})"
        )
        raise UsageError(f"implementation {name!r}: importing it {how}")
    verdict = json.loads(data)
    if not verdict["ok"]:
        raise UsageError(verdict["problem"])


def _read_all(fd: int, deadline: float) -> bytes | None:
    """Everything written to `fd` until its writer closes it; None at the deadline."""
    chunks = []
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
