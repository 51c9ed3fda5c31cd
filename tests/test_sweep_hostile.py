"""Sweeps fed what an attacker (or a broken plug-in) would feed them: they record it and go on."""

import json
import os
import re
import shlex
import signal
import subprocess
import time

import pytest

from commprof.cli import main
from commprof.records.files import read_records
from commprof.terminal import one_line
from tests.sweeprun import only_run_dir, run_sweep, sweep_env, tiny_model, torchrun_args

pytestmark = pytest.mark.processes

MARKUP = "markup [/] [bold]x :smile:"
NEWLINES = "x\ntouch PWNED\n#"


def test_nan_results_hostile_labels_and_leftover_helpers_are_dealt_with_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """One sweep of hostile points: NaNs, labels carrying markup and newlines, and a plug-in that leaves a helper
    running in a session of its own (the point must end it)."""
    model = tiny_model(tmp_path)
    pids = tmp_path / "pids"
    monkeypatch.setenv("COMMPROF_TEST_PIDS", str(pids))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "hostile"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 3\nwarmup = 1\n'
        'point_timeout_s = 30\n[[points]]\nimpl = "tests.plugins.faulty:NaNOnRank0"\n'
        f'[[points]]\nlabel = {json.dumps(MARKUP)}\nenv = {{ COMMPROF_TEST_KNOB = "a" }}\n'
        f'[[points]]\nlabel = {json.dumps(NEWLINES)}\nenv = {{ COMMPROF_TEST_KNOB = "b" }}\n'
        '[[points]]\nenv = { COMMPROF_TEST_KNOB = "c" }\n'
        '[[points]]\nimpl = "tests.plugins.faulty:LeavesADaemon"\n'
    )
    out = run_sweep(2, "--sweep", str(sweep), "--out", str(tmp_path / "runs"), "--no-doctor")
    helpers = [int(pid) for pid in pids.read_text().split()]
    try:
        assert out.returncode == 0, out.stderr[-3000:]
        # each rank's helper ended with its point (twice where the confirmation measured the point again)
        assert len(helpers) in (2, 4) and not any(_alive(pid) for pid in helpers)
    finally:
        for pid in helpers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    records = [r for r in read_records(only_run_dir(tmp_path / "runs") / "results.jsonl") if r["mode"] == "eager"]
    status = {r["point"]["label"]: r["status"] for r in records}  # read back printable: "x touch PWNED #"
    assert status["tests.plugins.faulty:NaNOnRank0"] == "wrong"
    assert status[MARKUP] == status[one_line(NEWLINES)] == status["COMMPROF_TEST_KNOB=c"] == status["defaults"] == "ok"
    assert status["tests.plugins.faulty:LeavesADaemon"] == "ok"
    (nan,) = [r for r in records if r["status"] == "wrong"]
    assert nan["check"]["non_finite"] > 0 and "NaN/Inf" in nan["message"]
    assert MARKUP in out.stdout
    assert (
        "6 points will run in stage 0, up to 6 in all, then up to 8 measurements confirming the answer" in out.stderr
    ), out.stderr[:2000]  # before the first point
    report = tmp_path / "report"
    assert main(["report", str(only_run_dir(tmp_path / "runs")), "--out", str(report)]) == 0
    shell = subprocess.run(
        ["env", "-i", "bash", "--norc", "-c", f"source {report / 'recommend.env'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert shell.returncode == 0 and shell.stderr == "" and not (tmp_path / "PWNED").exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start_hanging_sweep(tmp_path, name: str):
    """A sweep whose second point hangs for up to 120 s; returns (torchrun process, its results file)."""
    model = tiny_model(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "{name}"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 3\nwarmup = 1\n'
        'point_timeout_s = 120\n[axes]\nimpl = ["default", "tests.plugins.faulty:Hang"]\n'
    )
    out_dir = tmp_path / "runs with spaces"
    proc = subprocess.Popen(
        torchrun_args(2, "--sweep", str(sweep), "--out", str(out_dir), "--no-doctor"),
        env=sweep_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        results = list(out_dir.glob("*/results.jsonl")) if out_dir.exists() else []
        if results and results[0].read_text().count("\n") >= 2:
            time.sleep(1)  # the hanging point has started
            return proc, results[0]
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the sweep never finished its baseline")


def _controllers(torchrun_pid: int) -> list[int]:
    """The controllers torchrun started, by rank (started in rank order)."""
    found = subprocess.run(["pgrep", "-P", str(torchrun_pid)], capture_output=True, text=True).stdout.split()
    return sorted(int(pid) for pid in found)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_one_controller_ends_the_sweep_promptly(tmp_path, signum):
    proc, results = _start_hanging_sweep(tmp_path, "signal")
    try:
        rank0 = _controllers(proc.pid)[0]
        os.kill(rank0, signum)
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=100)
        assert time.monotonic() - started < 60  # not the hanging point's 120 s limit
        assert "Interrupted. Finished points are saved" in stderr
        assert f"--resume {shlex.quote(str(results.parent))}" in stderr  # a path with spaces, quoted
        assert results.read_text().count("\n") == 2  # the baseline stays; the aborted point is not recorded
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_live_run_refuses_a_resume_then_a_killed_peer_controller_is_one_clear_line(tmp_path):
    """One live sweep, two faults around it: a second sweep resuming it is refused naming the holder and the
    first goes on untouched; then killing rank 1's controller ends it with one clear line."""
    proc, results = _start_hanging_sweep(tmp_path, "live")
    try:
        second = run_sweep(2, "--resume", str(results.parent), "--no-doctor", timeout=100)
        assert second.returncode != 0, second.stderr[-2000:]
        assert f"is being written by pid {proc.pid}" not in second.stderr  # the holder is rank 0, not torchrun
        assert re.search(r"is being written by pid \d+ on host \S+ \(since ", second.stderr), second.stderr[-2000:]
        assert proc.poll() is None  # the first sweep goes on, untouched
        assert results.read_text().count("\n") == 2

        rank1 = _controllers(proc.pid)[1]
        os.kill(rank1, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=100)
        ours = [line for line in stderr.splitlines() if line.startswith(("commprof", "[rank0]"))]
        assert "[rank0]: Traceback" not in stderr, stderr[-3000:]
        assert any("rank 0: another rank's controller is gone" in line and "--resume" in line for line in ours)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
