"""Routing for a graph-mode engine: sizes and engine lines are decided on graph-mode per-op times only; eager
times are shown, labelled with the host issue cost they include, and a setting timed only eagerly never routes."""

import json

from commprof.cli import main
from commprof.records.schema import step_record
from commprof.report.analysis.routing import NOT_ROUTED, routing_plan
from commprof.report.analysis.routing_candidates import EAGER_HOST, EAGER_ONLY, candidates
from commprof.report.analysis.routing_settings import routing_settings
from tests.report_fixtures import make_meta
from tests.test_routing import FIG, bands_of, record

SIZES = (7, 14, 56)  # T of hidden 1024: 14, 28 and 112 KiB all-reduces


def disagreeing() -> list[dict]:
    """Eagerly b12x is fastest (a cheap host call); replayed as a graph FlashInfer's PCIe kernel is, and b12x loses."""
    records = []
    for t in SIZES:
        records += [
            record("p000", "default", t, "eager", 30.0),
            record("p000", "default", t, "graph", 20.0),
            record("p001", "b12x", t, "eager", 8.0),
            record("p001", "b12x", t, "graph", 19.0),
            record("p002", "flashinfer-pcie-ipc", t, "eager", 40.0),
            record("p002", "flashinfer-pcie-ipc", t, "graph", 6.0),
        ]
    return records


def test_routes_and_engine_lines_follow_the_graph_ranking_where_eager_disagrees():
    plan = routing_plan(candidates(disagreeing(), "p000"), 8, FIG)
    (graph,) = bands_of(plan, mode="graph")
    assert graph["impl"] == "flashinfer-pcie-ipc" and graph["evidence"]["verdict"] == "beyond noise"
    assert (graph["min_bytes"], graph["max_bytes"]) == (14336, 114688)
    # the eager plan shows b12x fastest but routes nothing, and says why
    (eager,) = bands_of(plan, mode="eager")
    assert eager["baseline"] and eager["impl"] == "nccl"
    assert eager["evidence"]["verdict"] == NOT_ROUTED + EAGER_HOST
    b12x = [c for c in plan["curves"] if c["impl"] == "b12x" and c["mode"] == "eager"]
    assert b12x and all(c["not_routed"] == EAGER_HOST for c in b12x)
    settings, _notes = routing_settings(plan["bands"], 1024, 2)
    assert {s.impl for s in settings} == {"flashinfer-pcie-ipc"}
    sglang = next(s for s in settings if s.engine == "SGLang")
    assert dict(sglang.variables)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"


def test_a_setting_timed_only_eagerly_is_shown_as_eager_only_and_never_routed():
    records = []
    for t in SIZES:
        records += [
            record("p000", "default", t, "eager", 30.0),
            record("p000", "default", t, "graph", 20.0),
            record("p001", "b12x", t, "eager", 5.0),  # its graph-mode step gave no per-op time (e.g. capture failed)
        ]
    plan = routing_plan(candidates(records, "p000"), 8, FIG)
    assert [b["impl"] for b in plan["bands"] if b["collective"] == "all_reduce"] == ["nccl", "nccl"]
    eager_only = [g for g in plan["gaps"] if g["mode"] == "graph"]
    assert [g["bytes"] for g in eager_only] == [t * 2048 for t in SIZES]
    assert all(g["why"] == f"p001 (b12x): {EAGER_ONLY}" for g in eager_only)
    (eager,) = bands_of(plan, mode="eager")
    assert EAGER_ONLY in eager["evidence"]["verdict"]
    assert routing_settings(plan["bands"], 1024, 2)[0] == []
    # with no graph-mode time at all, still no engine line from eager times
    eager_records = [r for r in records if r["mode"] == "eager"]
    assert routing_settings(routing_plan(candidates(eager_records, "p000"), 8, FIG)["bands"], 1024, 2)[0] == []


def test_a_gloo_run_routes_its_eager_times_to_show_the_method():
    records = [{**r, "backend": "gloo"} for r in disagreeing() if r["mode"] == "eager"]
    plan = routing_plan(candidates(records, "p000"), 2, None)
    assert bands_of(plan, mode="eager")[0]["impl"] == "b12x"
    assert all(not c["not_routed"] for c in plan["curves"])


def test_the_report_routes_on_graph_times_and_labels_eager_evidence(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    records = []
    for r in disagreeing():
        step = sum(r["op_us"]["median"])
        step_us = {"n": 200, "min": step, "median": step, "mean": step, "p90": step, "p99": step, "cv": 0.01}
        records.append(step_record(**{**r, "run_id": "run", "step_us": step_us, "iterations": 200}))
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    meta = make_meta("run")
    meta.pop("floor", None)
    (run / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    routing = (out / "routing.txt").read_text()
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1" in routing and "SGLANG_B12X" not in routing
    assert EAGER_HOST in routing
    decision = json.loads((out / "summary.json").read_text())["runs"][0]
    assert {s["impl"] for s in decision["engines"]["settings"]} == {"flashinfer-pcie-ipc"}
