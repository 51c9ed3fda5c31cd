"""What does a sweep rank's fork server cost to start? Forked from the controller vs a clean interpreter.

A controller forks its server before it loads torch (commprof.replay.forkserver): the server then costs a fork.
The fallback, where a fork would not be sound (another thread, torch already used), is a clean interpreter that
imports torch itself. Each sample is a fresh interpreter started as a controller starts, interleaved (clean,
forked, clean, ...); each line gives the median CPU seconds of the server process (from its reaping) and the wall
seconds from start() to its first reply.

    python bench/fork_server_start.py [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_server(clean: bool) -> dict[str, float]:
    """In a fresh interpreter: start a server (`clean`: beside another thread, so not forked), end it."""
    sys.path.insert(0, str(ROOT))
    from commprof.replay.forkserver import ForkServer

    release = threading.Event()
    other = threading.Thread(target=release.wait)
    if clean:
        other.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    with ForkServer.start() as server:
        wall = time.perf_counter() - wall
        assert server.forked is not clean
    release.set()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"cpu_s": cpu, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--one", choices=["clean", "forked"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_server(args.one == "clean")))
        return
    samples: dict[str, list[dict[str, float]]] = {"clean": [], "forked": []}
    for _ in range(args.pairs):
        for kind in samples:
            done = subprocess.run([sys.executable, __file__, "--one", kind], capture_output=True, text=True, check=True)
            samples[kind].append(json.loads(done.stdout))
    for kind, label in (("clean", "clean interpreter"), ("forked", "forked from controller")):
        cpu = statistics.median(s["cpu_s"] for s in samples[kind])
        wall = statistics.median(s["wall_s"] for s in samples[kind])
        print(f"{label:22}  server {cpu:6.3f} CPU-s  {wall:6.3f} s to ready  (median of {args.pairs})")


if __name__ == "__main__":
    main()
