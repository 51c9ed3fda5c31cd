"""Sweeps fed what an attacker (or a broken plug-in) would feed them: they record it and go on."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from commprof.records.files import read_records
from tests.sweeprun import only_run_dir, run_sweep, sweep_env, tiny_model, torchrun_args

pytestmark = pytest.mark.slow

MARKUP = "markup [/] [bold]x :smile:"
NEWLINES = "x\ntouch PWNED\n#"


def test_nan_results_and_hostile_labels_are_recorded_and_the_sweep_goes_on(tmp_path):
    model = tiny_model(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "hostile"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 3\nwarmup = 1\n'
        'point_timeout_s = 30\n[[points]]\nimpl = "tests.plugins.faulty:NaNOnRank0"\n'
        f'[[points]]\nlabel = {json.dumps(MARKUP)}\nenv = {{ COMMPROF_TEST_KNOB = "a" }}\n'
        f'[[points]]\nlabel = {json.dumps(NEWLINES)}\nenv = {{ COMMPROF_TEST_KNOB = "b" }}\n'
        '[[points]]\nenv = { COMMPROF_TEST_KNOB = "c" }\n'
    )
    out = run_sweep(2, "--sweep", str(sweep), "--out", str(tmp_path / "runs"), "--no-doctor")
    assert out.returncode == 0, out.stderr[-3000:]
    records = [r for r in read_records(only_run_dir(tmp_path / "runs") / "results.jsonl") if r["mode"] == "eager"]
    status = {r["point"]["label"]: r["status"] for r in records}
    assert status["tests.plugins.faulty:NaNOnRank0"] == "wrong"
    assert status[MARKUP] == status[NEWLINES] == status["COMMPROF_TEST_KNOB=c"] == status["defaults"] == "ok"
    (nan,) = [r for r in records if r["status"] == "wrong"]
    assert nan["check"]["non_finite"] > 0 and "NaN/Inf" in nan["message"]
    assert MARKUP in out.stdout


def test_resume_of_a_run_still_going_is_refused_naming_the_holder(tmp_path):
    model = tiny_model(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "live"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 3\nwarmup = 1\n'
        'point_timeout_s = 120\n[axes]\nimpl = ["default", "tests.plugins.faulty:Hang"]\n'
    )
    out_dir = tmp_path / "runs"
    first = subprocess.Popen(
        torchrun_args(2, "--sweep", str(sweep), "--out", str(out_dir), "--no-doctor"),
        env=sweep_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the baseline is on disk, the hanging point is running
            results = list(out_dir.glob("*/results.jsonl")) if out_dir.exists() else []
            if results and results[0].read_text().count("\n") >= 2:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the first sweep never finished its baseline")
        second = run_sweep(2, "--resume", str(results[0].parent), "--no-doctor", timeout=100)
        assert second.returncode != 0, second.stderr[-2000:]
        assert f"is being written by pid {first.pid}" not in second.stderr  # the holder is rank 0, not torchrun
        assert re.search(r"is being written by pid \d+ on host \S+ \(since ", second.stderr), second.stderr[-2000:]
        assert first.poll() is None  # the first sweep goes on, untouched
        assert results[0].read_text().count("\n") == 2
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
