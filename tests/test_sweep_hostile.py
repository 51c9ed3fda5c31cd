"""Sweeps fed what an attacker (or a broken plug-in) would feed them: they record it and go on."""

import json

import pytest

from commprof.records.files import read_records
from tests.sweeprun import only_run_dir, run_sweep, tiny_model

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
