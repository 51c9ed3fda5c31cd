"""Rank 0's pre-flight (floor probe, doctor) cannot strand the other ranks: they wait for it through the store up
to its own limits, and a doctor that hangs or breaks is a failing verdict, not the end of the sweep."""

import json
import threading
import time
from pathlib import Path

import pytest

from commprof.sweep.running import run_folder


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
def test_a_sweep_whose_rank_0_doctor_outlasts_the_group_timeout_measures_its_first_point(lost_agent_sweep):
    """The controllers' group timeout is the point limit (12 s, its slack taken away) and rank 0's doctor takes
    16 s: the other rank waits for it through the store, and the first point is measured (the launch then loses
    its agent, tests/shared_runs.py)."""
    assert lost_agent_sweep["run"], lost_agent_sweep["stderr"][-3000:]
    run = Path(lost_agent_sweep["run"])
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert any(r["status"] == "ok" and r["mode"] == "eager" for r in records), records
    assert "doctor" in json.loads((run / "meta.json").read_text())
