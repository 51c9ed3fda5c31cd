"""The interleaved confirmation: which points a sweep measures again beside the baseline, how the report reads the
A/B/A measurements and their noise floor, and that only a confirmed point becomes the answer (in process, on the
real gloo run's records; the sweep that makes the file on gloo: tests/test_interleaved_processes.py)."""

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.evidence import MEASURED, Evidence
from commprof.records.files import INTERLEAVED_FILE, RESULTS_FILE
from commprof.report.analysis.interleaved import interleaved
from commprof.sweep.planning import interleave
from commprof.sweep.planning.config import parse_sweep
from tests.test_report_evidence import gloo_run_with


def _step(point_id, tokens, median, p90=None, order=None, env=None, status="ok"):
    point = {"point_id": point_id, "label": point_id, "impl": "default", "env": env or {}, "options": {}}
    if order is not None:
        point["interleaved"] = order
    return {
        "kind": "step",
        "point_id": point_id,
        "point": point,
        "tokens": tokens,
        "mode": "eager",
        "status": status,
        "step_us": {"median": median, "p90": p90 if p90 is not None else median * 1.05},
    }


def test_each_candidate_is_read_against_the_baselines_beside_it_and_the_floor_is_their_largest_spread():
    records = [
        *[_step("p000", t, 100.0, order=1) for t in (1, 4)],  # A: 200 summed
        *[_step("p000", t, 104.0, order=2) for t in (1, 4)],  # A: 208 (the A/A control: 4 %)
        *[_step("p002", t, 50.0, 52.0, order=3) for t in (1, 4)],  # B1
        *[_step("p000", t, 101.0, order=4) for t in (1, 4)],  # A: 202
        *[_step("p003", t, 90.0, order=5) for t in (1, 4)],  # B2
        _step("p000", 1, 99.0, order=6),  # A: T = 4 failed, so not a measurement
        _step("p000", 4, 99.0, order=6, status="error"),
    ]
    found = interleaved(records, "eager", {1, 4})
    assert found.baseline_id == "p000" and found.baseline_us == (200.0, 208.0, 202.0, None)
    assert found.noise_floor_pct == pytest.approx(4.0)  # 200 -> 208; 208 -> 202 is 2.97 %
    b1, b2 = found.confirmations
    assert (b1.point_id, b1.total_us, b1.p90_total_us, b1.baseline_us) == ("p002", 100.0, 104.0, 202.0)
    assert b2.point_id == "p003" and b2.baseline_us is None  # the A after it failed: not confirmable
    assert "measured 4 times beside 2 candidate(s)" in found.sentence() and "±4.0 %" in found.sentence()
    assert interleaved([], "eager", {1}).noise_floor_pct is None


def test_the_floor_raises_the_bar_every_measured_verdict_must_clear():
    plain, floored = Evidence(MEASURED), Evidence(MEASURED, noise_floor_pct=30.0, drift_pct=10.0)
    assert plain.beats(60.0, 75.0, 100.0) is True and floored.beats(60.0, 75.0, 100.0) is False
    assert floored.beats(60.0, 69.0, 100.0) is True and floored.margin_pct == 30.0
    assert "noise floor" in floored.rule and "±30.0 %" in floored.rule and floored.to_dict()["noise_floor_pct"] == 30


SWEEP = """
[run]
model = "kimi-k2.5"
tokens = [1, 4]
[[points]]
env = { COMMPROF_KNOB = "v1" }
[[points]]
env = { COMMPROF_KNOB = "v2" }
[[points]]
env = { COMMPROF_KNOB = "v3" }
[[points]]
env = { COMMPROF_KNOB = "v4" }
[[points]]
impl = "nccl+rmsnorm"
"""


def test_the_sweep_confirms_at_most_three_faster_unfused_points_after_an_a_a_control():
    spec = parse_sweep(SWEEP)
    ids = [p.point_id for p in spec.points]
    medians = dict(zip(ids, (100.0, 40.0, 95.0, 50.0, 60.0, 10.0)))  # p005 is the fused reference: never
    results = []
    for point in spec.points:
        for t in (1, 4):
            record = _step(point.point_id, t, medians[point.point_id], env=point.env)
            record["point"]["impl"] = point.impl
            results.append({**record, "fused_rmsnorm": point.impl == "nccl+rmsnorm"})
    found = interleave.candidates(spec, results)
    # p002 (95: p90 99.75 x 2 not below 200) is inside noise; the others, fastest first, at most three
    assert [(c.point.point_id, c.answer) for c in found] == [(ids[i], interleave.ENVIRONMENT) for i in (1, 3, 4)]
    order = interleave.sequence(found)
    assert [m.point.point_id for m in order] == [ids[0], ids[0], ids[1], ids[0], ids[3], ids[0], ids[4], ids[0]]
    assert {m.against for m in order} == {ids[0]} and {m.tokens for m in order} == {(1, 4)}
    assert len(order) == interleave.measurements(found) and interleave.sequence([]) == []


def run_with_confirmation(tmp_path: Path, candidate_factor: float, file: bool = True) -> Path:
    """The real gloo run with OMP_NUM_THREADS=2 made 3x faster in its first pass (a planted gain, or a baseline
    caught in a burst), then confirmed: the baseline (s1-p000) measured three times, and s1-p001 between the
    second and third with its first-pass times divided by `candidate_factor` (the claim check's measured scenarios
    too: tests/test_decision.py)."""
    run = gloo_run_with(tmp_path, lambda r: True, faster=3.0)
    records = [json.loads(line) for line in (run / RESULTS_FILE).read_text().splitlines()]
    base = [r for r in records if r["point_id"] == "s1-p000"]
    candidate = [r for r in records if r["point_id"] == "s1-p001"]
    lines = []
    for order, rows, factor in (
        (1, base, 1.0),
        (2, base, 1.02),
        (3, candidate, 3.0 / candidate_factor),
        (4, base, 0.99),
    ):
        for record in rows:
            again = json.loads(json.dumps(record))
            again["point"]["interleaved"] = order
            if again.get("step_us"):
                again["step_us"] = {k: v * factor if k not in ("n", "cv") else v for k, v in again["step_us"].items()}
            lines.append(json.dumps(again))
    if file:
        (run / INTERLEAVED_FILE).write_text("".join(line + "\n" for line in lines))
    return run


def _summary(run: Path, out: Path) -> tuple[dict, str]:
    assert main(["report", str(run), "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())["runs"][0], (out / "recommend.env").read_text()


def test_a_first_pass_gain_that_is_not_there_beside_the_baseline_is_not_exported(tmp_path):
    summary, env = _summary(run_with_confirmation(tmp_path, candidate_factor=1.0), tmp_path / "out")
    environment, nccl = summary["environment"], summary["nccl"]
    assert environment["interleaved"]["noise_floor_pct"] == pytest.approx(3.0, abs=0.1)
    assert environment["evidence"]["noise_floor_pct"] == pytest.approx(3.0, abs=0.1)
    assert "noise floor" in environment["evidence"]["rule"] and "noise floor" in env.split("Rule:", 1)[1]
    assert nccl["keeps_baseline"] and nccl["confirmation"].startswith("not confirmed: measured again"), nccl
    # The claim over every T is the confirmation's figures held to the floor: one error term of the one rule.
    claim = next(c for c in summary["claims"] if c["id"] == nccl["claim"])
    assert claim["verdict"] != "beyond error" or claim["gain_pct"] < 0
    assert "noise floor" in [term["name"] for term in claim["error"]] and "interleaved confirmation" in claim["subject"]
    assert (
        "export OMP_NUM_THREADS" not in env and "Not confirmed: measured again beside the baseline, it did not" in env
    )


def test_a_gain_confirmed_beside_the_baseline_is_the_answer(tmp_path):
    summary, env = _summary(run_with_confirmation(tmp_path, candidate_factor=3.0), tmp_path / "out")
    nccl = summary["nccl"]
    assert nccl["point"]["point_id"] == "s1-p001" and not nccl["keeps_baseline"] and nccl["live"]
    assert nccl["confirmation"].startswith("confirmed: measured again between two measurements of the baseline")
    claim = next(c for c in summary["claims"] if c["id"] == nccl["claim"])
    assert claim["verdict"] == "beyond error" and claim["before"] == nccl["baseline_total_us"]
    assert "export OMP_NUM_THREADS=2" in env and "Confirmed: measured again between two measurements" in env


def test_a_run_whose_confirmation_found_nothing_to_confirm_exports_nothing(tmp_path):
    run = run_with_confirmation(tmp_path, 3.0, file=False)
    (run / INTERLEAVED_FILE).write_text("")
    summary, env = _summary(run, tmp_path / "out")
    assert summary["environment"]["interleaved"]["confirmations"] == [] and "export OMP_NUM_THREADS" not in env
    claim = next(c for c in summary["claims"] if c["id"] == summary["nccl"]["claim"])
    assert claim["verdict"] == "not judged" and "not measured again beside the baseline" in claim["reason"]


def test_a_gain_inside_the_baselines_drift_so_far_is_no_candidate():
    spec = parse_sweep(SWEEP)
    base, knob = spec.points[0], spec.points[1]
    results = [_step(p.point_id, t, m, env=p.env) for p, m in ((base, 100.0), (knob, 70.0)) for t in (1, 4)]
    assert [c.point.point_id for c in interleave.candidates(spec, results)] == [knob.point_id]
    # the baseline measured again at 150: a 50 % band, which a 30 % gain does not clear
    repeats = [
        {**_step(base.point_id, t, 150.0), "point": {**_step(base.point_id, t, 0)["point"], "repeat": 1}}
        for t in (1, 4)
    ]
    assert interleave.baseline_drift_pct(spec, results, repeats, "eager") == pytest.approx(50.0)
    assert interleave.candidates(spec, results, repeats) == []


def test_a_setting_nccl_did_not_engage_never_ranks_as_that_setting(tmp_path):
    """The gloo run's 3x faster OMP_NUM_THREADS=2, its records marked not engaged (as the sweep marks a point whose
    setting NCCL's log shows it did not engage): no claim, table row or file names it."""
    run = run_with_confirmation(tmp_path, candidate_factor=3.0, file=False)
    records = [json.loads(line) for line in (run / RESULTS_FILE).read_text().splitlines()]
    for record in records:
        if record["point"]["env"].get("OMP_NUM_THREADS") == "2":
            record["status"], record["message"] = "not_engaged", "the log shows the setting was not engaged"
    (run / RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    summary, env = _summary(run, tmp_path / "out")
    assert summary["run"]["status_counts"].get("not_engaged") and "export OMP_NUM_THREADS" not in env
    engaged = {r["point_id"] for r in records if r["status"] == "not_engaged"}
    assert not any(p in c["subject"] for c in summary["claims"] for p in engaged), summary["claims"]
    assert summary["nccl"]["fastest"] is None or summary["nccl"]["fastest"]["point_id"] not in engaged
