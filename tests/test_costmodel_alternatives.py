"""The simulator gates other all-reduces as the real box would (the implementations' own rules over the
topology's facts), predicts the rest from a stated model or the floor, and no verdict rests on a floor-only bound."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from commprof.cli import main
from commprof.costmodel.alternatives import box_context, kernel_model, refusal
from commprof.costmodel.sweep_simulation import simulate_sweep
from commprof.costmodel.topology import load_topology
from commprof.evidence import SIMULATED, Evidence, ModelError
from commprof.sweep.planning.config import parse_sweep

SWEEP = """
name = "alternatives"
[run]
model = "kimi-k2.5"
tokens = [1, 16]
phase = "verify"
iterations = 5
warmup = 1
[[points]]
impl = "flashinfer-pcie-ipc"
label = "pcie-ipc"
[[points]]
impl = "symm-mem"
label = "symm"
[[points]]
impl = "flashinfer-fused"
options = { use_oneshot = false }
label = "fused two-shot"
[[points]]
impl = "b12x"
label = "b12x"
"""


def _by_label(records, label, tokens, mode="graph"):
    return next(r for r in records if r["point"]["label"] == label and r["tokens"] == tokens and r["mode"] == mode)


def test_the_implementations_own_gates_decide_on_the_simulated_box():
    gen5 = load_topology("pcie-gen5-switch-p2p")
    context = box_context(gen5, 8, "bfloat16", (1, 16), 7168)
    assert context.compute_capability == (12, 0) and context.libraries_assumed
    # Libraries count as installed (the box's, not this machine's), so only hardware and shape rules speak.
    assert refusal("b12x", context, {}) is None and refusal("flashinfer-pcie-ipc", context, {}) is None
    two_shot = refusal("flashinfer-fused", context, {"use_oneshot": False}, tokens=1)
    assert two_shot is not None and "T > world size" in two_shot
    no_atomics = box_context(replace(gen5, p2p_atomics=False), 8, "bfloat16", (1,), 7168)
    reason = refusal("symm-mem", no_atomics, {})
    assert "native P2P atomics" in reason and "says p2p_atomics = false" in reason
    h100 = box_context(load_topology("nvlink-h100"), 8, "bfloat16", (1,), 7168)
    assert "SM12" in refusal("b12x", h100, {})
    no_p2p = box_context(load_topology("pcie-dual-socket-shm"), 8, "bfloat16", (1,), 7168)
    assert "peer-to-peer" in refusal("flashinfer-pcie-ipc", no_p2p, {})


def test_records_say_why_an_implementation_would_not_run_on_the_box():
    spec = parse_sweep(SWEEP, "alternatives.toml")
    b12x = _by_label(simulate_sweep(spec, load_topology("nvlink-h100"), None, "run-x"), "b12x", 1)
    assert b12x["status"] == "unsupported" and b12x["message"].startswith("would not run on nvlink-h100: ")
    records = simulate_sweep(spec, load_topology("pcie-gen5-switch-p2p"), None, "run-x")
    fused = _by_label(records, "fused two-shot", 1)
    assert fused["status"] == "unsupported" and "would not run on pcie-gen5-switch-p2p at T = 1" in fused["message"]
    assert _by_label(records, "fused two-shot", 16)["status"] == "ok"  # T = 16 > 8 ranks: two-shot runs


def test_a_stated_model_wins_over_the_floor_and_the_floor_is_only_a_bound():
    gen5 = load_topology("pcie-gen5-switch-p2p")
    assert kernel_model("flashinfer-pcie-ipc", gen5) is gen5.impls["flashinfer-pcie-ipc"]
    bound = kernel_model("flashinfer-fused", gen5)
    assert bound.basis == "floor" and bound.expected_error_pct is None and "lower bound" in bound.source
    assert kernel_model("flashinfer-fused", replace(gen5, floor=None)) is None


def test_two_models_must_both_be_wrong_in_their_favour_for_a_win():
    evidence = Evidence(SIMULATED, model_error=ModelError(41.0, "prior"))
    assert evidence.beats(11.0, 11.0, 25.4) is True  # one model: a 57 % gain beyond its 41 %
    assert evidence.beats(11.0, 11.0, 25.4, (50.0, 41.0)) is False  # 16.5 is not below 15.0
    assert evidence.beats(5.0, 5.0, 25.4, (50.0, 41.0)) is True  # 7.5 < 15.0
    assert evidence.beats(1.0, 1.0, 25.4, (None, 41.0)) is False  # an unknown error decides nothing


def test_a_floor_only_bound_is_shown_but_never_ranked_recommended_or_routed(tmp_path):
    pytest.importorskip("commprof.report.command")
    sweep = tmp_path / "alt.toml"
    sweep.write_text(SWEEP)
    out, report = tmp_path / "runs", tmp_path / "report"
    assert main(["simulate", "--topology", "pcie-gen4", "--sweep", str(sweep), "--out", str(out)]) == 0
    (run_dir,) = out.iterdir()
    symm = _by_label([json.loads(line) for line in (run_dir / "results.jsonl").open()], "symm", 1)
    assert symm["status"] == "ok"  # predicted: the fastest bound in this run
    assert main(["report", str(run_dir), "--out", str(report)]) == 0
    (run,) = json.loads((report / "summary.json").read_text())["runs"]
    assert all(row["impl"] != "symm-mem" for row in run["tables"]["choices"])
    assert all(row["impl"] != "symm-mem" for row in run["tables"]["alternatives"])
    assert all(band["impl"] != "symm-mem" for band in run["routes"])
    assert all(c["point_id"] not in run["environment"]["untested"] for c in run["plan"]["candidates"])
    assert any(curve["impl"] == "symm-mem" for curve in run["routing"]["curves"])
    assert "symm-mem is predicted only as the floor of its algorithm" in (report / "index.html").read_text()
