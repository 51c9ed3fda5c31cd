"""A calibration prices only the sizes it was judged on: a simulated op outside them (MiniMax-M2's tiny fp32 q/k
variance all-reduces, a multi-MB logits all-gather) is priced by NCCL's uncalibrated model with its error and
labelled "outside the calibrated sizes"; each step's error covers its ops' (their time-weighted mean), and the
run's covers every step's. In process: one point at one T, a hand-written calibration."""

from pathlib import Path

from commprof.cli import main
from commprof.records.files import read_records
from commprof.report.analysis.run_analysis import analyze_run
from commprof.report.command import load_run
from commprof.report.flags import report_options, sweep_options

# As `commprof calibrate` writes it for the 8 x RTX 4090 SHM log (tests/fixtures/nccl-tests), judged on 8 KB-1 MB.
CALIBRATION = """[costmodel]
link = "shm"
arch = "ampere"
channels = 2
channel_bw_gbps = 6.5
nccl_bw_gbps = 12.0
overhead_us = 1.02

[costmodel.hop_us]
LL = 1.78
LL128 = 2.5
Simple = 5.7

[fit]
protocols = ["LL"]
expected_error_pct = 23.7
band_names = ["8-64 KB", "64 KB-1 MB"]
band_error_pct = [16.2, 23.7]
error_basis = "largest absolute error at any size of each band"
model = "costmodel"
ranks = 8
"""
MINIMAX = Path(__file__).parent / "fixtures" / "model-configs" / "MiniMax-M2.json"
SWEEP = """name = "minimax-t4"
description = "MiniMax-M2 at TP 8, T = 4: NCCL's defaults only."

[run]
model = "{model}"
tokens = [4]
phase = "verify"
"""
JUDGED = (8 << 10, 1 << 20)
CLI = {"compute_ms": None, "draft_ms": None, "accept": None, "baseline": None, "allow_partial": True}


def simulate(tmp_path, name, *calibration):
    out = tmp_path / name
    sweep = tmp_path / "sweep.toml"
    assert (
        main(["simulate", "--topology", "pcie-dual-socket-shm", "--sweep", str(sweep), "--out", str(out), *calibration])
        == 0
    )
    (run_dir,) = out.iterdir()
    (eager,) = [r for r in read_records(run_dir / "results.jsonl") if r["mode"] == "eager"]
    return run_dir, eager


def test_ops_outside_the_calibrated_sizes_are_priced_by_the_prior_and_say_so(tmp_path):
    (tmp_path / "sweep.toml").write_text(SWEEP.format(model=MINIMAX))
    (tmp_path / "cal.toml").write_text(CALIBRATION)
    run_dir, calibrated = simulate(tmp_path, "cal", "--calibration", str(tmp_path / "cal.toml"))
    _, prior = simulate(tmp_path, "prior")
    nccl = calibrated["nccl"]
    note = nccl["outside_calibration"]
    # 62 variance all-reduces of 8 fp32 values (32 B) and the 1.6 MB logits all-gather
    assert (note["label"], note["judged"], note["ops"]) == ("outside the calibrated sizes", "8 KB-1 MB", 63)
    assert note["sizes"] == [32, 4 * 200064 * 2]
    assert note["expected_error_pct"] == 46.5  # the prior's over every size at 8 ranks (prior_error.toml)
    for choice in nccl["choices"]:
        inside = JUDGED[0] <= choice["bytes"] <= JUDGED[1]
        assert choice.get("calibrated", True) is inside, choice
    # Priced by the prior: each such op takes the uncalibrated model's time; the calibrated ones do not.
    ops, base = calibrated["op_us"], prior["op_us"]
    for size, mine, theirs in zip(ops["bytes"], ops["median"], base["median"]):
        assert (mine == theirs) is not (JUDGED[0] <= size <= JUDGED[1]), size
    # The step's error covers its ops': above the calibration's band (16.2 %), at most the prior's.
    assert 16.2 < nccl["expected_error_pct"] < 46.5 and "outside the calibrated sizes" in nccl["error_basis"]
    assert "outside the calibrated sizes" in calibrated["message"]
    run_id, records, meta, _ = load_run(run_dir)
    assert meta.model_error.pct >= nccl["expected_error_pct"]
    assert "63 op(s) of its steps outside the calibrated sizes (8 KB-1 MB)" in meta.model_error.basis
    (run,) = analyze_run(run_id, records, meta, report_options(CLI, sweep_options(meta)), str(run_dir))
    assert "outside the calibrated sizes" in run.evidence.rule  # what the page says the verdicts follow


def test_a_crossover_size_outside_the_calibrated_sizes_is_the_priors_and_keeps_its_error():
    from commprof.costmodel.calibration_file import params_from_toml
    from commprof.costmodel.crossover_sim import all_reduce_prediction
    from commprof.costmodel.simulate import SimulatedRun
    from commprof.costmodel.topology import load_topology
    from commprof.evidence import ModelError
    from commprof.report.analysis.run_analysis import with_run_error
    from commprof.sweep.planning.spec import SweepPoint

    calibration = params_from_toml(CALIBRATION, "cal.toml")
    prior = ModelError(46.5, "the prior over every size")
    run = SimulatedRun(load_topology("pcie-dual-socket-shm"), calibration, "sim", prior=prior)
    point = SweepPoint("p000", "defaults", "default", {}, {})
    inside, outside = all_reduce_prediction(point, 64 << 10, run, 8), all_reduce_prediction(point, 4 << 20, run, 8)
    assert (inside.calibration, inside.error_pct) == ("cal.toml", 23.7)
    assert (outside.calibration, outside.error_pct) == ("nccl-prior", 46.5)
    assert outside.basis.startswith("outside the calibrated sizes (8 KB-1 MB): priced by NCCL's uncalibrated model")
    record = {"kind": "crossover", "model_error": {"baseline_pct": 46.5, "outside_calibration": True}}
    (kept,) = with_run_error([record], ModelError(23.7, "the run's"))
    assert kept["model_error"]["baseline_pct"] == 46.5  # never the calibration's smaller figure
