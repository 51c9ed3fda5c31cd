"""Rank 0's pre-flight (floor probe, doctor) cannot strand the other ranks: they wait for it through the store up
to its own limits, and a doctor that hangs or breaks is a failing verdict, not the end of the sweep."""

import json
import subprocess
import threading
import time

import pytest

from commprof.sweep.running import run_folder
from tests.distributed import free_port
from tests.sweeprun import REPO, TORCHRUN, only_run_dir, sweep_env, tiny_model


def test_a_doctor_that_hangs_is_a_failing_verdict_within_its_budget(monkeypatch):
    released = threading.Event()  # the hung doctor's thread ends with the test, not 30 s into later ones
    monkeypatch.setattr(run_folder, "run_doctor", lambda quick, floor: released.wait(30))
    started = time.monotonic()
    try:
        (verdict,) = run_folder._doctor_within(0.5, {})
        assert time.monotonic() - started < 5
    finally:
        released.set()
    assert verdict.status == "fail" and "no verdict within 0.5 s (a hang)" in verdict.detail


def test_a_doctor_that_raises_is_a_failing_verdict(monkeypatch):
    def broken(quick, floor):
        raise OSError("nvidia-smi vanished")

    monkeypatch.setattr(run_folder, "run_doctor", broken)
    (verdict,) = run_folder._doctor_within(5, {})
    assert verdict.status == "fail" and "OSError: nvidia-smi vanished" in verdict.detail


def test_the_other_ranks_wait_out_the_pre_flight_limits():
    from commprof.floor.fresh import PROBE_TIMEOUT_S

    assert run_folder.PREFLIGHT_S >= PROBE_TIMEOUT_S + run_folder.DOCTOR_BUDGET_S


@pytest.mark.processes
def test_a_sweep_whose_rank_0_doctor_outlasts_the_group_timeout_measures_its_first_point(tmp_path):
    """The controllers' group timeout is the point limit (12 s, its slack taken away) and rank 0's doctor takes
    16 s: the other rank waits for it through the store, and the first point is measured."""
    model = tiny_model(tmp_path, layers=1)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "slow-doctor"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 2\nwarmup = 1\n'
        'point_timeout_s = 12\n[[points]]\nimpl = "default"\n'
    )
    args = ["--sweep", str(sweep), "--out", str(tmp_path / "runs"), "--no-nccl-debug"]
    launch = ["--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    result = subprocess.run(
        [*TORCHRUN, *launch, "-m", "tests.plugins.slow_doctor_sweep", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=sweep_env() | {"SLOW_DOCTOR_S": "16"},
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = only_run_dir(tmp_path / "runs")
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert any(r["status"] == "ok" and r["mode"] == "eager" for r in records), records
    assert "doctor" in json.loads((run / "meta.json").read_text())
