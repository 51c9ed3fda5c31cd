"""Simulating NCCL_GRAPH_FILE points: the generated graph predicted against NCCL's own, each with its error."""

from __future__ import annotations

from pathlib import Path

from commprof.cli import main
from commprof.costmodel.graph_sim import GRAPH_ERROR_BASIS, file_model, generated_models
from commprof.costmodel.simulate import PRIOR_ERROR_BASIS
from commprof.costmodel.sweep_simulation import simulate_sweep
from commprof.costmodel.topology import load_topology
from commprof.doctor.bundle import read_bundle
from commprof.nccl_graph.box import box_from_facts
from commprof.nccl_graph.candidates import build_candidates
from commprof.sweep import parse_sweep

BUNDLE = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
SWEEP = 'name = "g"\n[run]\nmodel = "kimi-k2.5"\ntokens = [1]\ntp = 8\n[axes]\nnccl_graph = ["auto", "generated"]\n'


def _eager(records):
    return {r["point_id"]: r for r in records if r["kind"] == "step" and r["mode"] == "eager"}


def test_generated_graphs_are_predicted_with_their_own_error_and_hash():
    box = box_from_facts(read_bundle(BUNDLE))
    spec = parse_sweep(SWEEP)
    topology = load_topology("pcie-gen5-switch-p2p")
    records = _eager(simulate_sweep(spec, topology, None, "sim", graphs=generated_models(box)))
    baseline = records["p000"]
    assert baseline["status"] == "ok" and baseline["nccl"]["error_basis"] == PRIOR_ERROR_BASIS
    assert "graph" not in baseline["nccl"]
    by_name = {f"generated:{c.name}": c for c in build_candidates(box)}
    for point in spec.points[1:]:
        record = records[point.point_id]
        candidate = by_name[point.env["NCCL_GRAPH_FILE"]]
        assert record["status"] == "ok" and record["source"] == "simulated"
        assert record["nccl"]["graph"] == {
            "file": point.env["NCCL_GRAPH_FILE"],
            "sha256": candidate.sha256,
            "channels": candidate.channels,
        }
        assert record["nccl"]["channels"] == candidate.channels
        assert record["nccl"]["error_basis"] == GRAPH_ERROR_BASIS and record["nccl"]["expected_error_pct"] >= 41
        assert "63.0 GB/s per hop" in record["message"] and "derived, not measured" in record["message"]
    # Fewer channels at the same hop figure differ from NCCL's own search: the model sees the graph.
    two = records[spec.points[1].point_id]["step_us"]["median"]
    assert two != baseline["step_us"]["median"]


def test_without_a_box_generated_points_are_unsupported_and_bad_files_say_why(tmp_path):
    spec = parse_sweep(SWEEP)
    records = _eager(simulate_sweep(spec, load_topology("pcie-gen5-switch-p2p"), None, "sim", graphs={}))
    assert records["p000"]["status"] == "ok"
    assert records["p001"]["status"] == "unsupported" and "not read" in records["p001"]["message"]
    assert "no ring graph" in file_model("x.xml", '<graphs version="1"></graphs>\n')
    assert "NCCL would refuse it" in file_model("x.xml", "<graphs>\n")
    good = build_candidates(box_from_facts(read_bundle(BUNDLE)))[0]
    model = file_model("/g.xml", good.text)
    assert model.channels == good.channels and model.sha256 == good.sha256 and model.hop_gbps is None


def test_simulate_cli_shows_both_errors(tmp_path, capsys):
    sweep = tmp_path / "g.toml"
    sweep.write_text(SWEEP.replace('"generated"', '"generated:ring-2ch-same-hop"'))
    argv = ["simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", str(sweep), "--out", str(tmp_path)]
    assert main([*argv, "--graph-box", str(BUNDLE)]) == 0
    out = capsys.readouterr().out
    assert "NCCL's uncalibrated model with the graph file's channels" in out.replace("\n", " ")
    assert main(argv) == 0
    assert "pass --graph-box" in capsys.readouterr().out.replace("\n", " ")
