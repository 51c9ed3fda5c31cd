"""The sweep runner on real gloo processes: two "nodes" and NCCL settings on gloo (a launch shared with other tests:
tests/shared_runs.py), the dry run. (Faulty points, and a resume after a controller is killed: test_sweep_hostile.py.)"""

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.records.files import read_records
from tests.sweeprun import REPO, one_rank

pytestmark = pytest.mark.processes


def write_sweep(tmp_path, model, body, timeout=8, tokens=(2,)):
    path = tmp_path / "sweep.toml"
    path.write_text(
        f'name = "test"\n[run]\nmodel = "{model}"\ntokens = {list(tokens)}\niterations = 3\n'
        f"warmup = 1\npoint_timeout_s = {timeout}\n{body}"
    )
    return path


def test_two_node_launch_with_torchrun_rendezvous(gloo_sweep):
    """Two torchrun agents of one rank each (tests/shared_runs.py): one run of world size 2, and only global rank 0
    prints."""
    assert gloo_sweep["codes"] == [0, 0], gloo_sweep["stderr"][0][-2000:] + gloo_sweep["stderr"][1][-2000:]
    records = read_records(Path(gloo_sweep["run"]) / "results.jsonl")
    eager = [r for r in records if r["mode"] == "eager" and r["point_id"] == "p000"]
    assert eager[0]["status"] == "ok" and eager[0]["world_size"] == 2 and len(eager[0]["rank_step_median_us"]) == 2
    assert "p000" in gloo_sweep["stdout"][0] + gloo_sweep["stderr"][0] and gloo_sweep["stdout"][1] == ""


def test_nccl_settings_on_gloo_are_recorded_unsupported_and_never_timed(gloo_sweep, tmp_path):
    run = Path(gloo_sweep["run"])
    records = read_records(run / "results.jsonl")
    env_points = {json.dumps(r["point"]["env"], sort_keys=True): r["point_id"] for r in records if r["kind"] == "step"}
    ring = env_points[json.dumps({"NCCL_ALGO": "ring"})]
    channels = env_points[json.dumps({"NCCL_MAX_NCHANNELS": "4", "NCCL_MIN_NCHANNELS": "4", "OMP_NUM_THREADS": "2"})]
    by_point = {(r["point_id"], r["mode"], r["tokens"]): r for r in records if r["kind"] == "step"}
    assert by_point[("p000", "eager", 1)]["status"] == "ok"
    ring_record, channels_record = by_point[(ring, "eager", 1)], by_point[(channels, "eager", 1)]
    assert ring_record["status"] == "unsupported" and ring_record["step_us"] is None
    assert ring_record["message"] == "NCCL_ALGO has no effect on the gloo backend (NCCL does not run here)"
    assert channels_record["status"] == "unsupported"
    assert "NCCL_MAX_NCHANNELS and NCCL_MIN_NCHANNELS" in channels_record["message"]
    # Never timed: no worker started for them, so no worker log.
    assert (run / "points" / "p000" / "rank0.log").exists()
    assert not (run / "points" / ring).exists() and not (run / "points" / channels).exists()
    # The report of this real run: nothing NCCL exported or ruled, the first screen says what was not measured
    # and how to measure it, and nothing measured on CPU ranks is handed to an engine.
    report = tmp_path / "report"
    assert main(["report", str(run), "--out", str(report)]) == 0
    env = (report / "recommend.env").read_text()
    assert not [line for line in env.splitlines() if "NCCL_" in line and not line.startswith("#")]
    tuner = (report / "nccl_tuner.conf").read_text()
    assert not [line for line in tuner.splitlines() if line and not line.startswith("#")]
    flags = (report / "engine_flags.txt").read_text()
    assert not [line for line in flags.splitlines() if line.startswith(("source", "export"))]
    card = (report / "index.html").read_text().split('class="card set"', 1)[1].split("Every number here", 1)[0]
    assert f"Not measured (1 point, e.g. {ring}): NCCL_ALGO has no effect on the gloo backend" in card
    assert "Measure them on GPUs, where the sweep runs on NCCL." in card


@pytest.mark.processes  # the probe's fork server
def test_dry_run_writes_nothing_and_estimates_from_a_probe(tmp_path, monkeypatch, capsys):
    """`python -m commprof.allreduce_sweep --sweep sweeps/pcie8-verify.toml --tokens 4 --dry-run` from the checkout,
    on one rank, run here: the listing, an estimate from a probe measured on this launch, one line on stderr. (At
    one of the preset's four T: the probe replays Kimi-K2.5's step at each T the sweep has.)"""
    from commprof.sweep import command

    one_rank(monkeypatch)
    monkeypatch.chdir(REPO)
    status = command.main(
        ["--sweep", "sweeps/pcie8-verify.toml", "--tokens", "4", "--dry-run", "--out", str(tmp_path / "runs")]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "p000" in out and not (tmp_path / "runs").exists()
    assert "measured on this launch: the baseline" in out and "2 of 33 stage-0 points will run" in out
    assert len(err.strip().splitlines()) == 1, err
