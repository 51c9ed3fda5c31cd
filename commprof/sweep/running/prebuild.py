"""Before the first point: build the kernels the sweep's implementations compile on first use, once per node.

Local rank 0 of every node runs `python -m commprof.impls.jit_build` (a fresh process: it initializes CUDA,
which the controllers never do) outside every point's time limit, showing each build as it starts and ends;
the other controllers wait for it through the store. A build that fails makes the points needing it
`unsupported` with the compiler's error, without starting their workers. meta.json records where the cache
is and how each build went.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from commprof.impls.jit_build import FAILED
from commprof.impls.registry import load_impl, resolve_impl_name
from commprof.sweep.planning.points import preparation, sweep_impls

# A cold build of FlashInfer's TRT-LLM comm module takes minutes on a big machine, longer on a small one.
BUILD_TIMEOUT_S = 1800.0
STILL_BUILDING_S = 30.0  # how often a long build says it is still going


def point_builds(point, backend: str) -> tuple[str, ...]:
    """What a point's implementation builds on first use (see AllReduceImpl.jit_builds)."""
    return tuple(load_impl(resolve_impl_name(point.impl, backend)).jit_builds(backend, point.options))


def build_refusal(point, backend: str, failed: dict[str, str]) -> str | None:
    """The unsupported reason of a point whose build or whose setting's preparation failed before the sweep, or
    None."""
    for build in point_builds(point, backend):
        if build in failed:
            return f"building its kernels failed before the sweep ({build}): {failed[build]}"
    key = preparation_key(point.impl, point.options)
    if key in failed:
        return f"its setting's preparation failed before the sweep ({preparation_of(point, backend)}): {failed[key]}"
    return None


PREPARED = "prepared"  # under the run folder: one folder per setting with a preparation


def preparation_of(point, backend: str) -> str | None:
    """What a point's setting does once before its points are timed (points.preparation), or None."""
    return preparation(point.impl, point.options, backend)


def preparation_key(impl: str, options: dict) -> str:
    """A setting's prepared folder under the run folder (and its key among the failures before the sweep): the
    implementation and a digest of its options."""
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:10]
    return f"{PREPARED}/{re.sub(r'[^A-Za-z0-9_.+-]', '_', impl)}-{digest}"


def state_dir(run_dir: Path, point, backend: str, point_dir: Path) -> Path:
    """Where a point's implementation keeps its library state (AllReduceImpl.state_dir): its setting's prepared
    folder where the setting has a preparation, else the point's own."""
    if preparation_of(point, backend) is None:
        return point_dir / "state"
    return run_dir / preparation_key(point.impl, point.options)


def run_builder(
    request: dict[str, Any], note: Callable[[str], None], log_path: Path, timeout_s: float = BUILD_TIMEOUT_S
) -> dict[str, Any]:
    """Run the builder process, showing its events as they come; {"cache_dir", "builds": {build: outcome}}.

    Its stderr (compiler and library output) goes to `log_path`; a build it never finished (a crash, the
    time limit) is recorded as failed with the log's last lines.
    """
    report: dict[str, Any] = {"cache_dir": None, "builds": {}, "log": str(log_path)}
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "commprof.impls.jit_build", json.dumps(request)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)], daemon=True).start()
    deadline = time.monotonic() + timeout_s
    current, started, ended = None, time.monotonic(), False
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=min(STILL_BUILDING_S, max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            if current is not None:
                note(f"  {current[1]}: still building ({time.monotonic() - started:.0f} s)")
            continue
        if line is None:  # the builder closed its output: it ended
            ended = True
            break
        event = _event(line)
        if event.get("event") == "plan" and event["builds"]:
            note(f"building what the sweep's implementations compile on first use: {', '.join(event['builds'])}")
        elif event.get("event") == "start":
            current, started = (event["build"], event["name"]), time.monotonic()
            verb = "cached" if event.get("cached") else "building (first use: can take minutes)"
            note(f"  {event['name']}: {verb} ...")
        elif event.get("event") == "done":
            current = None
            report["builds"][event["build"]] = {k: v for k, v in event.items() if k not in ("event", "build")}
            why = f": {first_error(event['error'])}" if event.get("error") else ""
            note(f"  {event['name']}: {event['status']} in {event['seconds']:.0f} s{why}")
        elif event.get("event") == "end":
            report["cache_dir"] = event.get("cache_dir")
    timed_out = not ended
    if timed_out:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-5:])
    if current is not None:
        why = f"no result within {timeout_s:.0f} s" if timed_out else f"the builder exited {proc.returncode}"
        report["builds"][current[0]] = {"name": current[1], "status": FAILED, "error": f"{why}: {tail}"}
        note(f"  {current[1]}: failed: {why} (log: {log_path})")
    elif proc.returncode != 0:
        report["error"] = f"the builder exited {proc.returncode}: {tail}"
        note(f"building kernels before the sweep failed ({report['error']}); each point will build its own")
    return report


def first_error(error: str) -> str:
    """The line of a build error to show first: the compiler's own "error:" line where there is one."""
    lines = error.splitlines()
    return next((line for line in lines if "error:" in line), lines[-1] if lines else "")


def _event(line: str) -> dict:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return {}  # a library's own print on stdout
    return event if isinstance(event, dict) else {}


def failures(reports: list[dict | None]) -> dict[str, str]:
    """Build -> error over every node's report (a build that failed on any node fails the sweep's points)."""
    failed = {}
    for report in (r for r in reports if r):
        for build, outcome in report["builds"].items():
            if outcome["status"] == FAILED:
                failed.setdefault(build, outcome.get("error") or "failed")
    return failed


def prebuild(ctx, spec, model: dict, tp: int, note: Callable[[str], None]) -> tuple[dict[str, str], list[dict]]:
    """On every controller: (build -> error of the failed builds, every node's report); builds on local rank 0."""
    from commprof.replay.agreement import gather_via_store

    impls = [
        (i, o) for i, o in sweep_impls(spec) if load_impl(resolve_impl_name(i, ctx.backend)).jit_builds(ctx.backend, o)
    ]
    report = None
    if impls and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        request = {
            "backend": ctx.backend,
            "world_size": tp,
            "dtype": model["dtype"] if spec.dtype is None else spec.dtype,
            "tokens": list(spec.tokens),
            "hidden_size": model["hidden_size"],
            "impls": impls,
        }
        log_path = ctx.run_dir / f"kernel-builds.rank{ctx.rank}.log"
        report = run_builder(request, note if ctx.is_writer else lambda text: None, log_path)
    reports = gather_via_store(
        ctx.store,
        f"commprof/{ctx.run_id}/{ctx.session}/jit",
        ctx.rank,
        ctx.world_size,
        report,
        timedelta(seconds=BUILD_TIMEOUT_S + 120),
    )
    return failures(reports), [r for r in reports if r]
