"""Benchmark: render a SYNTHETIC run of 10,000 step records, then one of 100,000 (`commprof report`, in a process
of its own), and print the seconds and that process's memory peak beside the targets.

Targets on a 2-core machine: 10,000 records <= 2 s, 100,000 records <= 15 s, wall (the report renders in a
forked process, which forks workers of its own, report/worker.py: the CPU printed is every process's, the memory
peak the largest one's). The records come from
tests/report_fixtures.py (made-up numbers with the real shape: Kimi-K2.5, TP 8, T = 1, 4, 8, 16, eager + graph,
op_us on every eager record). Generating them is not timed; reading, analysing, plotting and writing every file is.

    python bench/report_render.py [--records 10000 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = {10_000: 2.0, 100_000: 15.0}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def render(run_dir: Path, out: Path) -> int:
    """Render `run_dir` into `out` from this process; print seconds (wall, then CPU of this process and of the
    processes it forked) and the largest process's memory peak in MiB."""
    from click.testing import CliRunner

    from commprof.report.command import report

    start, cpu_start, workers_start = time.perf_counter(), time.process_time(), _children_cpu()
    result = CliRunner().invoke(
        report, [str(run_dir), "--out", str(out), "--compute-ms", "5.0"], catch_exceptions=False
    )
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    workers_cpu = _children_cpu() - workers_start  # the report reaps its processes before it returns
    if result.exit_code != 0:
        print(result.output, file=sys.stderr)
        return 1
    peak_mib = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(f"{seconds:.2f} {cpu + workers_cpu:.2f} {peak_mib / 1024:.0f}")
    return 0


def generate(records: int, folder: Path) -> int:
    """Write the SYNTHETIC run of `records` records in `folder`/bench-run; print its number of points."""
    from tests.report_fixtures import TOKENS, make_records, many_points, write_run

    points = many_points(-(-records // (2 * len(TOKENS))))
    write_run(folder, "bench-run", records=make_records("bench-run", points=points)[:records])
    print(len(points))
    return 0


def _run(*args: str) -> str | None:
    """This script in a process of its own (so that no process's memory peak holds another's): its output."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        return None
    return done.stdout


def bench(records: int, keep: Path | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        generated = _run("--generate", str(records), tmp)
        if generated is None:
            return 1
        points = int(generated.split()[-1])
        os.sync()  # the run is on disk before the render is timed, as a user's is: its write-back is not timed
        run_dir = Path(tmp) / "bench-run"
        out = keep or Path(tmp) / "report"
        size_mb = (run_dir / "results.jsonl").stat().st_size / 1e6
        rendered = _run("--render", str(run_dir), str(out))
        if rendered is None:
            return 1
        seconds, cpu, peak = rendered.split()[-3:]
        html_mb = (out / "index.html").stat().st_size / 1e6
    target = TARGET_S.get(records)
    print(
        f"rendered {records} records ({points} points, results.jsonl {size_mb:.1f} MB) in {seconds} s wall"
        + (f" (target <= {target:g} s on 2 cores)" if target else "")
        + f", {cpu} s CPU in all its processes, memory peak {peak} MiB (its largest process, the render's; its "
        f"workers share most of those pages); index.html {html_mb:.1f} MB"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--keep", type=Path, default=None, help="render into this folder and keep it")
    parser.add_argument("--render", type=Path, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--generate", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render:
        return render(*args.render)
    if args.generate:
        return generate(int(args.generate[0]), Path(args.generate[1]))
    return max(bench(count, args.keep) for count in args.records)


if __name__ == "__main__":
    sys.exit(main())
