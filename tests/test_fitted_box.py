"""A calibration knows the box it was fitted on and is applied whole or not at all: applied to a box that differs
(the 8 x RTX 4090 SHM log's calibration on the 8 x RTX PRO 6000 Gen5 bundle, or on the Gen5 P2P preset) no point
uses it, the prior prices every point and the first screen says why; on its own box it keeps its error at the sizes
it was judged on (the ops outside them carry the prior's) and says where it was fitted. A file of the older layout
is read with the error and the box it states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.fitted_box import UNKNOWN, BoxFacts
from commprof.records.files import read_records

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # what these reports say is in their words

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


def _simulate(tmp_path: Path, calibration: Path, *where: str) -> tuple[dict, list[dict], str]:
    """(the report's Decision, the records its calibration priced, the report's first screen as text)."""
    out = tmp_path / "sim"
    assert main(["simulate", *where, "--sweep", str(SWEEP), "--calibration", str(calibration), "--out", str(out)]) == 0
    (run_dir,) = out.iterdir()
    report = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(report)]) == 0
    (run,) = json.loads((report / "summary.json").read_text())["runs"]
    records = [
        r for r in read_records(run_dir / "results.jsonl") if str(r.get("calibration", "")).startswith(calibration.name)
    ]
    first = (report / "index.html").read_text().split('id="r1-headline"', 1)[0]
    return run, records, first


def test_applied_to_another_box_it_prices_no_point_and_the_first_screen_says_why(calibration, tmp_path):
    """On the RTX PRO 6000 bundle (its SHM pairs share the calibration's transport; the Gen5 P2P preset is the claim
    check's scenario "calibration from another box", tests/test_decision.py)."""
    run, records, first = _simulate(tmp_path, calibration, "--from-bundle", str(BUNDLE))
    differ = "gpu, sm"
    use = run["environment"]["calibration"]
    assert use["applied"] is False and use["file"].startswith("cal.toml")
    assert (
        use["why"].startswith("fitted on 8 x NVIDIA GeForce RTX 4090, SM 8.9") and f"differ in {differ}" in use["why"]
    )
    assert records == []  # no point uses it: not the SHM points alone
    assert run["environment"]["evidence"]["calibration"] == "nccl-prior"
    assert f"Calibration {use['file']} NOT APPLIED: no point uses it" in first and "differ in" in first


def test_on_its_own_box_it_keeps_its_error_and_says_where_it_was_fitted(calibration, tmp_path):
    own = params_from_toml(calibration.read_text(), str(calibration)).fit["expected_error_pct"]
    run, records, first = _simulate(tmp_path, calibration, "--topology", "pcie-dual-socket-shm")
    evidence = run["environment"]["evidence"]
    assert run["environment"]["calibration"]["applied"] is True and records and "NOT APPLIED" not in first
    # Its own error holds for the sizes it was judged on; the logits all-gathers above 1 MB (T >= 4) are priced by
    # the prior, so the run's error covers theirs too (test_calibrated_range).
    inside = [r["nccl"] for r in records if r.get("nccl") and "outside_calibration" not in r["nccl"]]
    assert inside and all(n["expected_error_pct"] == own for n in inside)
    assert evidence["expected_error_pct"] > own and "outside the calibrated sizes" in evidence["expected_error_basis"]
    assert evidence["calibration_boxes"].startswith("fitted on 8 x NVIDIA GeForce RTX 4090")
    assert "applied to 8 x unknown, SM 8.9" in evidence["calibration_boxes"]


def test_a_calibration_of_the_older_layout_is_read_with_its_stated_error_and_box(calibration, tmp_path):
    """Before it stated its box and its error per band, calibrate wrote [fit] holdout_median_pct and the preset it
    was fitted on ([fit] topology): the file is read with that error and that box, never as "fitted on unknown,
    states no error"."""
    import re

    text = calibration.read_text()
    fit = text[text.index("[fit]") :]
    kept = [
        line
        for line in fit.splitlines()[1:]
        if line.startswith(("samples", "loss", "protocols", "topology", "link", "runs"))
    ]
    older = (
        text[: text.index("[fit]")]
        + "[fit]\n"
        + "\n".join(kept)
        + '\nholdout_median_pct = 17.4\nholdout_basis = "held out"\n'
    )
    assert "[fit.box]" not in older and not re.search(r"^expected_error_pct", older, re.M)
    path = tmp_path / "older.toml"
    path.write_text(older)
    run, records, _ = _simulate(tmp_path, path, "--topology", "pcie-dual-socket-shm")
    evidence = run["environment"]["evidence"]
    assert run["environment"]["calibration"]["applied"] is True and records
    assert evidence["expected_error_pct"] == 17.4 and "an older layout" in evidence["expected_error_basis"]
    assert evidence["calibration_boxes"].startswith("fitted on 8 x unknown, SM 8.9")  # the preset it names
    assert "states no error" not in json.dumps(run) and "fitted on unknown" not in json.dumps(run)


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
