"""The whole pipeline as a user runs it on CPU: torchrun sweep on gloo → results → report and exports."""

import json
import subprocess
import sys

import pytest

from commprof.records.files import read_records
from tests.sweeprun import REPO, only_run_dir, run_sweep, sweep_env, tiny_model

pytestmark = pytest.mark.processes


def test_gloo_sweep_then_report(tmp_path):
    model = tiny_model(tmp_path, layers=4, hidden=128, vocab=512)
    sweep = tmp_path / "e2e.toml"
    sweep.write_text(
        f'name = "e2e"\n[run]\nmodel = "{model}"\ntokens = [1, 4]\niterations = 4\nwarmup = 1\n'
        'point_timeout_s = 60\n[axes]\nimpl = ["default", "nccl+rmsnorm", "nccl"]\n'
        "[report]\ncompute_ms = 5.0\naccept_lengths = [1.3, 2.0]\n"
    )
    out = run_sweep(2, "--sweep", str(sweep), "--out", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr[-3000:]
    run = only_run_dir(tmp_path / "runs")
    records = read_records(run / "results.jsonl")
    assert {r["point"]["impl"] for r in records} == {"default", "nccl+rmsnorm", "nccl"}
    fused = [r for r in records if r["point"]["impl"] == "nccl+rmsnorm" and r["mode"] == "eager"]
    assert all(r["status"] == "ok" and r["fused_rmsnorm"] for r in fused)
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
