"""What does a sweep point cost beyond its measurement? Fork-server workers vs fresh Python processes.

Runs a real 2-rank gloo sweep of POINTS points (tiny model, so measurement is short) and reports, per point,
the controller's wall time minus the time the workers spent measuring: process start, rendezvous, gating,
teardown and the ranks' agreement. The baseline, measured in the same run: a fresh pair of
`python -c "import torch; init_process_group(gloo); destroy"` processes. Target: <= 0.25 s per point.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POINTS = 12
NAIVE_PAIRS = 4

NAIVE = """
import os, torch.distributed as d
d.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank={rank}, world_size=2)
t = __import__("torch").ones(8); d.all_reduce(t); d.destroy_process_group()
"""


def naive_pair_seconds() -> float:
    from tests.distributed import free_port

    port = free_port()
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", NAIVE.format(port=port, rank=r)]) for r in (0, 1)]
    for p in procs:
        p.wait(timeout=120)
    return time.perf_counter() - start


def sweep_overheads(tmp: Path) -> list[float]:
    from tests.sweeprun import only_run_dir, run_sweep, tiny_model

    values = ", ".join(f'"{i}"' for i in range(POINTS - 1))
    sweep = tmp / "bench.toml"
    sweep.write_text(
        f'name = "bench"\n[run]\nmodel = "{tiny_model(tmp)}"\ntokens = [1]\niterations = 3\n'
        f'warmup = 1\npoint_timeout_s = 60\n[axes.env]\nCOMMPROF_BENCH = ["default", {values}]\n'
    )
    out = run_sweep(2, "--sweep", str(sweep), "--out", str(tmp / "runs"), "--no-doctor", timeout=600)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    records = [json.loads(line) for line in (only_run_dir(tmp / "runs") / "results.jsonl").read_text().splitlines()]
    per_point: dict[str, dict] = {}
    for r in records:
        entry = per_point.setdefault(r["point_id"], {"duration": r["duration_s"], "measure": 0.0})
        entry["measure"] += r.get("measure_s") or 0.0
    return [p["duration"] - p["measure"] for p in per_point.values()]


def main() -> None:
    naive = [naive_pair_seconds() for _ in range(NAIVE_PAIRS)]
    with tempfile.TemporaryDirectory() as tmp:
        overheads = sweep_overheads(Path(tmp))
    fork = statistics.median(overheads)
    fresh = statistics.median(naive)
    print(f"{POINTS}-point 2-rank gloo sweep, seconds per point beyond measurement:")
    print(f"  fresh python+torch process pair (baseline) : median {fresh:.3f} s  ({NAIVE_PAIRS} pairs)")
    print(
        f"  commprof fork-server worker per point      : median {fork:.3f} s  "
        f"(min {min(overheads):.3f}, max {max(overheads):.3f})"
    )
    print(f"  ratio commprof / fresh processes           : {fork / fresh:.3f}   (target: <= 0.25 s per point)")


if __name__ == "__main__":
    main()
