"""The whole pipeline as a user runs it on CPU: torchrun sweep on gloo → results → report and exports (the launch is
shared with other tests: tests/shared_runs.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commprof.records.files import read_records
from tests.sweeprun import REPO, sweep_env

pytestmark = pytest.mark.processes


def test_gloo_sweep_then_report(gloo_sweep, tmp_path):
    assert gloo_sweep["codes"] == [0, 0], gloo_sweep["stderr"][0][-3000:]
    run = Path(gloo_sweep["run"])
    records = read_records(run / "results.jsonl")
    assert {"default", "nccl+rmsnorm", "nccl"} <= {r["point"]["impl"] for r in records}
    fused = [r for r in records if r["point"]["impl"] == "nccl+rmsnorm" and r["mode"] == "eager"]
    assert fused and all(r["status"] == "ok" and r["fused_rmsnorm"] for r in fused)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["doctor"]["checks"] and meta["sweep"]["report"]["accept_lengths"] == [1.3, 2.0]

    report_dir = tmp_path / "report"
    rendered = subprocess.run(
        [sys.executable, "-m", "commprof", "report", str(run), "--out", str(report_dir)],
        capture_output=True,
        text=True,
        env=sweep_env(),
        cwd=REPO,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    html = (report_dir / "index.html").read_text()
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org", "")  # self-contained
    assert run.name in html and "nccl+rmsnorm" in html
    summary = json.loads((report_dir / "summary.json").read_text())
    assert summary["runs"][0]["run"]["accepts"] == [1.3, 2.0]
    env_file = report_dir / "recommend.env"
    sourced = subprocess.run(
        ["bash", "-c", f"set -e; source {env_file}; echo sourced"], capture_output=True, text=True, timeout=30
    )
    assert sourced.returncode == 0 and "sourced" in sourced.stdout
    assert len((report_dir / "results.csv").read_text().splitlines()) == len(records) + 1
