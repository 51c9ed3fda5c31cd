"""Benchmark: render a SYNTHETIC run of 10,000 step records (`commprof report`, in process) and print the seconds.

Target: <= 5 s on a 2-core machine. The records come from tests/report_fixtures.py (made-up numbers with the
real shape: Kimi-K2.5, TP 8, T = 1, 4, 8, 16, eager + graph, op_us on every eager record). Generating them is
not timed; reading, analysing, plotting and writing every file is.

    python bench/report_render.py [--records 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from commprof.report.command import report  # noqa: E402
from tests.report_fixtures import TOKENS, make_records, many_points, write_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, default=None, help="render into this folder and keep it")
    args = parser.parse_args()
    per_point = 2 * len(TOKENS)
    points = many_points(-(-args.records // per_point))
    with tempfile.TemporaryDirectory() as tmp:
        records = make_records("bench-run", points=points)[: args.records]
        run_dir = write_run(Path(tmp), "bench-run", records=records)
        out = args.keep or Path(tmp) / "report"
        size_mb = (run_dir / "results.jsonl").stat().st_size / 1e6
        start, cpu_start = time.perf_counter(), time.process_time()
        result = CliRunner().invoke(
            report, [str(run_dir), "--out", str(out), "--compute-ms", "5.0"], catch_exceptions=False
        )
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if result.exit_code != 0:
            print(result.output, file=sys.stderr)
            return 1
        html_mb = (out / "index.html").stat().st_size / 1e6
    print(
        f"rendered {len(records)} records ({len(points)} points, results.jsonl {size_mb:.1f} MB) "
        f"in {seconds:.2f} s wall, {cpu:.2f} s CPU; index.html {html_mb:.1f} MB (target <= 5 s on 2 cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
