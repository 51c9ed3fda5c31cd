"""Drift-checked A/B: the baseline measured again over the run, its band, and a gain that drift explains away."""

import json

import pytest

from commprof.cli import main
from commprof.evidence import MEASURED, Evidence
from commprof.records.files import BASELINE_REPEATS_FILE, read_records
from commprof.report.analysis.drift import baseline_drift
from commprof.sweep import command as sweep_command
from commprof.sweep.planning.config import parse_sweep
from commprof.sweep.planning.spec import BaselineEvery
from tests.plugins.drifting import EPOCH_FILE_VARIABLE, RATE_VARIABLE
from tests.sweeprun import one_rank, only_run_dir, tiny_model


def _record(tokens, median, time_, repeat=None):
    point = {"point_id": "p000"} | ({"repeat": repeat} if repeat else {})
    return {
        "tokens": tokens,
        "mode": "eager",
        "status": "ok",
        "step_us": {"median": median},
        "time": time_,
        "point": point,
    }


def test_the_band_spans_the_baselines_measurements_summed_over_t():
    first = [_record(1, 100.0, "t0"), _record(4, 100.0, "t0")]
    repeats = [_record(1, 110.0, "t1", 1), _record(4, 110.0, "t1", 1), _record(1, 90.0, "t2", 2)]
    drift = baseline_drift(first, repeats, "eager", {1, 4})
    # repeat 2 lacks T = 4: not a measurement of the whole answer
    assert [s["total_us"] for s in drift.samples] == [200.0, 220.0]
    assert drift.band_pct == pytest.approx(10.0) and not drift.exceeded
    assert baseline_drift(first, [], "eager", {1, 4}) is None


def test_the_evidence_rule_gains_the_drift_term():
    plain, drifting = Evidence(MEASURED, backend="gloo"), Evidence(MEASURED, backend="gloo", drift_pct=20.0)
    assert plain.beats(80.0, 85.0, 100.0) is True
    assert drifting.beats(80.0, 85.0, 100.0) is False  # 85 is not below 100 lowered by 20 %
    assert drifting.beats(70.0, 75.0, 100.0) is True
    assert "drift" in drifting.rule and [t.name for t in drifting.error_terms((90.0, 95.0), (100.0, 101.0))] == [
        "spread",
        "drift",
    ]


def test_baseline_every_reads_points_or_minutes():
    base = '[run]\nmodel = "kimi-k2.5"\ntokens = [1]\n'
    assert parse_sweep(base + "baseline_every = 3\n").baseline_every == BaselineEvery(points=3)
    assert parse_sweep(base + 'baseline_every = "2min"\n').baseline_every == BaselineEvery(seconds=120.0)
    with pytest.raises(Exception, match="run.baseline_every"):
        parse_sweep(base + "baseline_every = 0\n")
    assert BaselineEvery(points=2).due(2, 0.0) and not BaselineEvery(points=2).due(1, 1e9)
    assert BaselineEvery(seconds=60.0).due(0, 61.0)


@pytest.mark.processes
def test_a_gain_that_the_baselines_drift_covers_is_not_recommended(tmp_path, monkeypatch, capsys):
    """A one-rank sweep run here whose plug-in slows as the run goes on, then its report."""
    model = tiny_model(tmp_path, layers=2, hidden=64, vocab=128)
    plugin = "tests.plugins.drifting:Drifting"
    sweep = tmp_path / "drift.toml"
    sweep.write_text(
        f'name = "drift"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 8\nwarmup = 1\n'
        "point_timeout_s = 120\nbaseline_every = 2\n"
        # A filler between candidate and reference lets the drift grow past the box's noise; two after the
        # reference put its measurement again (after 2 points) well later still, so the band spans the gain.
        f'[[points]]\nimpl = "{plugin}"\noptions = {{ variant = "a" }}\nlabel = "candidate"\n'
        '[[points]]\nimpl = "gloo"\nlabel = "filler"\n'
        f'[[points]]\nimpl = "{plugin}"\noptions = {{ variant = "b" }}\nlabel = "reference"\n'
        f'[[points]]\nimpl = "{plugin}"\noptions = {{ variant = "c" }}\nlabel = "filler 2"\n'
        '[[points]]\nimpl = "nccl"\nlabel = "filler 3"\n'
        '[report]\nbaseline = "reference"\n'
    )
    one_rank(monkeypatch)
    monkeypatch.setenv(EPOCH_FILE_VARIABLE, str(tmp_path / "epoch"))
    monkeypatch.setenv(RATE_VARIABLE, "5000")
    monkeypatch.chdir(tmp_path)
    args = ["--sweep", str(sweep), "--out", str(tmp_path / "runs"), "--no-doctor", "--no-nccl-debug", "--single-rank"]
    assert sweep_command.main(args) == 0, capsys.readouterr().err[-3000:]
    run = only_run_dir(tmp_path / "runs")
    records = read_records(run / "results.jsonl")
    repeats = read_records(run / BASELINE_REPEATS_FILE)
    assert repeats and {r["point"]["point_id"] for r in repeats} == {"p003"} and repeats[0]["point"]["repeat"] == 1
    eager = {r["point_id"]: r["step_us"] for r in records if r["mode"] == "eager" and r["status"] == "ok"}
    # Measured once, the candidate (measured first) would beat the reference beyond noise: the plug-in's delay
    # grows by 5 ms per all-reduce per second of the run, far beyond a 2-core box's noise ...
    assert Evidence(MEASURED).beats(eager["p001"]["median"], eager["p001"]["p90"], eager["p003"]["median"]), eager

    report_dir = tmp_path / "report"
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(report_dir)]) == 0
    assert "BASELINE DRIFT" in capsys.readouterr().err
    summary = json.loads((report_dir / "summary.json").read_text())["runs"][0]
    drift = summary["environment"]["drift"]
    # ... but the reference moved more than that over the run: not recommended, and the report says why.
    assert len(drift["samples"]) >= 2 and drift["exceeded"], drift
    assert summary["environment"]["evidence"]["drift_pct"] == pytest.approx(drift["band_pct"], abs=0.01)
    assert summary["nccl"]["point"] is None or summary["nccl"]["keeps_baseline"], summary["nccl"]
    assert "BASELINE DRIFT" in " ".join(summary["environment"]["not_a_result"])
    html = (report_dir / "index.html").read_text()
    assert "BASELINE DRIFT" in html and "baseline over the run" in html  # the banner and the figure
