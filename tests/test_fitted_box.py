"""A calibration knows the box it was fitted on: applied to a box that differs (the 8 x RTX 4090 SHM log's
calibration on the 8 x RTX PRO 6000 Gen5 bundle), it is judged by the prior's error, and the run's evidence says
"fitted on <box>, applied to <box>"; on its own box it keeps its error at the sizes it was judged on and says so
too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.fitted_box import UNKNOWN, BoxFacts
from commprof.records.files import read_records

FIXTURES = Path(__file__).parent / "fixtures"
LOG = FIXTURES / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt"
BUNDLE = FIXTURES / "doctor" / "asus-esc8000a-8x-rtxpro6000"
SWEEP = Path(__file__).resolve().parents[1] / "sweeps" / "pcie8-verify.toml"


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("box")
    assert main(["import-nccl-tests", str(LOG), "--out", str(root / "imported")]) == 0
    (imported,) = (root / "imported").iterdir()
    assert main(["calibrate", str(imported), "--out", str(root / "cal.toml")]) == 0
    return root / "cal.toml"


def test_the_calibration_records_the_box_it_was_fitted_on(calibration):
    fit = params_from_toml(calibration.read_text(), str(calibration)).fit
    box = BoxFacts.from_dict(fit["box"])
    assert box == BoxFacts("NVIDIA GeForce RTX 4090", "8.9", UNKNOWN, "8", "shm", UNKNOWN)


def _simulate(tmp_path: Path, calibration: Path, *where: str) -> tuple[dict, list[dict]]:
    out = tmp_path / "sim"
    assert main(["simulate", *where, "--sweep", str(SWEEP), "--calibration", str(calibration), "--out", str(out)]) == 0
    (run_dir,) = out.iterdir()
    report = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(report)]) == 0
    (run,) = json.loads((report / "summary.json").read_text())["runs"]
    records = [
        r for r in read_records(run_dir / "results.jsonl") if str(r.get("calibration", "")).startswith(calibration.name)
    ]
    return run["evidence"], records


def test_applied_to_the_sm120_gen5_bundle_it_no_longer_states_its_own_error(calibration, tmp_path):
    own = params_from_toml(calibration.read_text(), str(calibration)).fit["expected_error_pct"]
    evidence, records = _simulate(tmp_path, calibration, "--from-bundle", str(BUNDLE))
    boxes = evidence["calibration_boxes"]
    assert boxes.startswith("fitted on 8 x NVIDIA GeForce RTX 4090, SM 8.9") and "transport shm" in boxes
    assert "applied to 8 x NVIDIA RTX PRO 6000" in boxes and "SM 12, PCIe Gen5" in boxes
    assert evidence["expected_error_pct"] != own and evidence["expected_error_pct"] >= 25.0  # the box prior's
    assert "applied to another box" in evidence["expected_error_basis"] and boxes in evidence["expected_error_basis"]
    nccl = [r["nccl"] for r in records if r.get("nccl")]
    assert nccl and all(boxes in n["error_basis"] and n["expected_error_pct"] != own for n in nccl)


def test_on_its_own_box_it_keeps_its_error_and_says_where_it_was_fitted(calibration, tmp_path):
    own = params_from_toml(calibration.read_text(), str(calibration)).fit["expected_error_pct"]
    evidence, records = _simulate(tmp_path, calibration, "--topology", "pcie-dual-socket-shm")
    # Its own error holds for the sizes it was judged on; the logits all-gathers above 1 MB (T >= 4) are priced by
    # the prior, so the run's error covers theirs too (test_calibrated_range).
    inside = [r["nccl"] for r in records if r.get("nccl") and "outside_calibration" not in r["nccl"]]
    assert inside and all(n["expected_error_pct"] == own for n in inside)
    assert evidence["expected_error_pct"] > own and "outside the calibrated sizes" in evidence["expected_error_basis"]
    assert evidence["calibration_boxes"].startswith("fitted on 8 x NVIDIA GeForce RTX 4090")
    assert "applied to 8 x unknown, SM 8.9" in evidence["calibration_boxes"]


def test_a_fact_one_side_does_not_state_is_not_a_difference():
    fitted = BoxFacts("RTX 4090", "8.9", UNKNOWN, "8", "shm", "2.19.3")
    assert fitted.differs(BoxFacts(sm="8.9", ranks="8", transport="shm")) == []
    assert fitted.differs(BoxFacts(sm="12", ranks="4", transport="pci", nccl="2.27.3")) == [
        "sm",
        "ranks",
        "transport",
        "nccl",
    ]


def test_the_error_is_the_largest_over_the_bands_the_plans_sizes_use(calibration):
    from commprof.costmodel.fitted_box import judged_sizes, over_plan_sizes

    params = params_from_toml(calibration.read_text(), str(calibration))
    bands = dict(zip(params.fit["band_names"], params.fit["band_error_pct"]))
    small = over_plan_sizes(params, {14336, 57344}).fit
    assert small["expected_error_pct"] == bands["8-64 KB"] and "8-64 KB" in small["error_basis"]
    both = over_plan_sizes(params, {14336, 229376}).fit
    assert both["expected_error_pct"] == max(bands.values())
    # A prefill-sized op (2 MB) was never judged: the simulation prices it with the prior (test_calibrated_range).
    big = over_plan_sizes(params, {14336, 2 << 20}).fit
    assert big["expected_error_pct"] == bands["8-64 KB"]
    judged = judged_sizes(params.fit)
    assert judged.describe() == "8 KB-1 MB" and judged.covers(1 << 20) and not judged.covers((1 << 20) + 1)
