"""The fourth attack run's cases that need sweeps of their own: a point a stopped torchrun agent left as a timeout is
measured again on --resume, a refusal every rank makes keeps its one line. (The million-point dry run's listing is
held linear and streamed in test_attack_replay_round4.py, in process, at two sizes.)"""

import json
import subprocess
import sys

import pytest

from commprof.records.files import read_records
from tests.sweeprun import one_rank, own_frames, sweep_env, tiny_model, torchrun_args


@pytest.mark.processes  # the sweep's fork server
def test_a_point_left_as_a_timeout_is_measured_again_on_resume(tmp_path, monkeypatch, capsys):
    """A one-rank sweep of two points, run here, whose second one's records say `timeout` (what a point in flight
    gets while the torchrun agent is stopped with Ctrl-Z): --resume measures it again, and keeps the first as it
    was."""
    from commprof.sweep import command

    model = tiny_model(tmp_path, layers=1)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "stop"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 2\nwarmup = 1\npoint_timeout_s = 60\n'
        '[axes.env]\nCOMMPROF_KNOB = ["a", "b"]\n'
    )
    one_rank(monkeypatch)
    monkeypatch.chdir(tmp_path)
    flags = ["--no-doctor", "--no-nccl-debug", "--single-rank"]
    assert command.main(["--sweep", str(sweep), "--out", str(tmp_path / "runs"), *flags]) == 0, capsys.readouterr()
    (run,) = (tmp_path / "runs").iterdir()
    records = read_records(run / "results.jsonl")
    stopped = records[-1]["point_id"]
    measured = sorted(r["status"] for r in records if r["point_id"] == stopped)  # eager ok, graph unsupported on gloo
    assert "timeout" not in measured
    for record in records:
        if record["point_id"] == stopped:
            record.update(status="timeout", message="rank 0: no result within the point's limit of 60 s")
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    kept = [r for r in records if r["point_id"] != stopped]

    capsys.readouterr()
    one_rank(monkeypatch)
    resumed = command.main(["--resume", str(run), "--no-doctor", "--no-nccl-debug"])
    err = capsys.readouterr().err
    assert resumed == 0 and "Traceback" not in err, err[-3000:]
    after = read_records(run / "results.jsonl")
    assert after[: len(kept)] == kept
    again = [r for r in after if r["point_id"] == stopped]
    assert sorted(r["status"] for r in again) == measured, err[-2000:]


@pytest.mark.processes
def test_a_value_every_rank_refuses_is_said_in_one_line_on_every_launch(tmp_path):
    """`torchrun --nproc-per-node 2 -m commprof.allreduce_sweep --tokens 1e23`, two launches: each ends in the
    one line of rank 0 (rank 1 refuses alike and waits, so torchrun cannot end rank 0 before it prints). The python
    is reached through a folder named commprof (where `git clone` puts a checkout and its .venv): torchrun's own
    block then names that folder, and no frame of it is taken for commprof's."""
    python = tmp_path / "commprof" / "venv" / "bin" / "python"
    python.parent.parent.parent.mkdir()
    python.parent.parent.symlink_to(sys.prefix, target_is_directory=True)
    assert python.exists()
    for _ in range(2):
        done = subprocess.run(
            [str(python), *torchrun_args(2, "--tokens", "1e23", "--dry-run", "--no-doctor")[1:]],
            capture_output=True,
            text=True,
            env=sweep_env(),
            cwd=tmp_path,
            timeout=120,
        )
        errors = [line for line in done.stderr.splitlines() if line.startswith("commprof: error")]
        assert done.returncode != 0 and own_frames(done.stderr) == [], done.stderr[-3000:]  # torchrun's block only
        assert len(errors) == 1 and "--tokens" in errors[0] and "1e23" in errors[0], done.stderr[-3000:]
