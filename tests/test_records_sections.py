"""The nested sections of a record and of meta.json are typed: a wrong type or an unknown value inside one is
refused in one line naming the file and the nested key; what the writers write (and the real run folders kept as
fixtures) reads back whole."""

import copy
import json
from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.records.files import read_records
from commprof.records.run_meta import meta_data, read_meta
from tests.report_fixtures import make_meta, make_records, simulated_meta

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = [FIXTURES / "readme-demo", FIXTURES / "report" / "cpu-smoke-gloo"]
NCCL_LOG = FIXTURES / "nccl_log" / "nccl-2.28-p2p-disabled-sys-graph.log"


def _set(target: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {}) if isinstance(target, dict) else target[key]
    target[path[-1]] = value


@pytest.mark.parametrize(
    "path, value, problem",
    [
        (("check", "ok"), "yes", "check: ok: expected true/false, got a string"),
        (("check", "bad_ranks"), ["a"], "check: bad_ranks: an item: expected an integer, got a string"),
        (("check", "max_abs_err"), -1.0, "check.max_abs_err -1.0 is negative or not finite"),
        (("spacing",), {"compute": 3}, "spacing: compute: expected a string, got an integer"),
        (("kernel_model",), {"basis": "guess"}, "kernel_model.basis 'guess' is not one of published, floor"),
        (("kernel_model",), {"timed": "later"}, "kernel_model.timed 'later' is not one of eager, graph"),
        (("kernel_model",), {"expected_error_pct": "x"}, "kernel_model: expected_error_pct: expected a finite"),
        (("nccl", "graphs"), [{"channels": "x"}], "nccl: graphs: an item: channels: expected an integer"),
        (("nccl", "graphs"), [{"gpus": "0-1"}], "nccl: graphs: an item: gpus: expected a list, got a string"),
        (("nccl", "findings"), [{"severity": "bad"}], "nccl.findings[0].severity 'bad' is not one of info, warn, fail"),
        (("nccl", "findings"), [{"evidence": [1]}], "nccl: findings: an item: evidence: an item: expected a string"),
        (("nccl", "graph"), {"channels": -1}, "nccl.graph.channels -1 is out of range"),
        (("nccl", "graph_file"), {"loaded": "x"}, "nccl: graph_file: loaded: expected true/false or null"),
        (("step_us", "n"), -5, "step_us.n -5 is out of range (allowed: 0..2147483648)"),
        (("point", "stage"), -1, "point.stage -1 is out of range (allowed: 0..2147483648)"),
        (("plan", "hidden_size"), -7168, "plan.hidden_size -7168 is out of range"),
        (("plan", "tokens"), 2**70, "plan.tokens 1180591620717411303424 is out of range (allowed: 1..16777216)"),
    ],
)
def test_a_step_record_section_of_the_wrong_shape_is_one_line_naming_its_key(tmp_path, path, value, problem):
    records = json.loads(json.dumps(make_records("crafted")))
    target = next(r for r in records if r["kind"] == "step" and r.get("nccl"))
    _set(target, path, value)
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(UsageError) as refused:
        read_records(results)
    message = str(refused.value)
    assert f"results.jsonl:{records.index(target) + 1}: not a usable record: {problem}" in message, message
    assert "\n" not in message


def test_a_crossover_records_model_error_of_the_wrong_shape_is_refused(tmp_path):
    from commprof.records.schema import crossover_record

    point = {"point_id": "p001", "label": "b12x", "impl": "b12x", "env": {}, "options": {}}
    record = crossover_record(
        source="simulated", run_id="r", point_id="p001", point=point, status="ok", collective="all_reduce",
        mode="graph", baseline={**point, "point_id": "p000"}, bytes=4096, model_error={"impl_pct": "x"},
    )  # fmt: skip
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(record) + "\n")
    with pytest.raises(UsageError, match=r"results.jsonl:1: not a usable record: model_error: impl_pct: expected"):
        read_records(results)


@pytest.mark.parametrize(
    "path, value, problem",
    [
        (("platform",), "linux", "platform: expected an object or null, got a string"),
        (("platform", "system"), 1, "platform: system: expected a string or null, got an integer"),
        (("floor", "status"), "guessed", "floor.status 'guessed' is not one of measured, file, preset, not measured"),
        (("floor", "figures"), {"evidence": "rumour"}, "floor.figures.evidence 'rumour' is not one of measured, pub"),
        (("floor", "figures"), {"sync_us": -1}, "floor.figures.sync_us -1 is negative or not finite"),
        (("floor", "not_measured"), "x", "floor: not_measured: expected a list or null, got a string"),
        (("doctor", "status"), "nope", "doctor.status 'nope' is not one of ok, warn, fail, skipped"),
        (("doctor", "checks", 0, "status"), "bad", "doctor.checks[0].status 'bad' is not one of ok, warn, fail"),
        (("doctor", "counts"), [1], "doctor: counts: expected an object or null, got a list"),
        (("kernel_builds",), [{"builds": {"a:b": {"status": "maybe"}}}], "kernel_builds[0].builds.a:b.status 'm"),
        (("kernel_builds",), [{"builds": {"a:b": {"seconds": "x"}}}], "kernel_builds: an item: builds: a value: sec"),
        (("nccl_graphs",), {"candidates": [{"channels": "x"}]}, "nccl_graphs: candidates: an item: channels: exp"),
        (("nccl_graphs",), {"candidates": [{"ring": "0 1"}]}, "nccl_graphs: candidates: an item: ring: expected a"),
        (("calibration",), 5, "calibration: expected an object or a string or null, got an integer"),
        (("calibration",), {"fit": []}, "calibration: fit: expected an object or null, got a list"),
        (("model_error",), {"pct": -3}, "model_error.pct -3 is not an error in % (allowed: 0..1000)"),
        (("model_error",), {"basis": 1}, "model_error: basis: expected a string or null, got an"),
        (("imported",), [{"runs": [{"ranks": 0}]}], "imported[0].runs[0].ranks 0 is out of range"),
        (("imported",), [{"warnings": "x"}], "imported: an item: warnings: expected a list or null"),
        (("sweep", "report"), {"accept_lengths": "x"}, "sweep: report: accept_lengths: expected a list or nu"),
        (
            ("sweep", "report"),
            {"accept": [2.0]},
            "sweep.report.accept: unknown key (allowed: compute_ms, draft_ms, accept_lengths, b",
        ),  # an option never dropped
        (("doctor", "checks"), [{"verdict": "FAIL", "why": "guessed"}], "doctor: checks: an item: no status"),
        (("topology", "host", "numa_nodes"), [{"node": "x"}], "topology: host: numa_nodes: an item: node: expec"),
        (("topology", "links"), {"pcie": {"channels": -1}}, "topology.links.pcie.channels -1 is out of range"),
        (("topology", "impls"), {"b12x": {"basis": "guess"}}, "topology.impls.b12x.basis 'guess' is not one of pu"),
    ],
)
def test_a_meta_section_of_the_wrong_shape_is_one_line_naming_its_key(tmp_path, path, value, problem):
    meta = {**make_meta("crafted"), **json.loads(json.dumps(simulated_meta("crafted")))}
    meta["doctor"] = make_meta("crafted")["doctor"]
    _set(meta, path, value)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError) as refused:
        read_meta(tmp_path)
    message = str(refused.value)
    assert f"meta.json: not usable run metadata: {problem}" in message, message
    assert "\n" not in message


def _said(section: dict) -> dict:
    """A meta.json as its reader reads it: a null field says nothing (a map's null values kept: versions)."""
    return {
        key: {k: v for k, v in value.items()} if key == "versions" else _said(value) if isinstance(value, dict) else
        [_said(item) if isinstance(item, dict) else item for item in value] if isinstance(value, list) else value
        for key, value in section.items()
        if value is not None
    }  # fmt: skip


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_real_run_folders_still_read(run):
    meta = json.loads((run / "meta.json").read_text())
    assert meta["doctor"]["checks"] and meta["topology"]["host"]["numa_nodes"] and meta["platform"]
    assert meta_data(read_meta(run)) == _said(meta)
    written = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert read_records(run / "results.jsonl") == written


def test_a_measured_records_nccl_sections_read_back_whole(tmp_path):
    """The parsed log's graphs and findings and a graph file's load check keep every key their writers write."""
    from commprof.nccl_graph.load_check import check_loaded
    from commprof.sweep.running.nccl_summary import summarize_nccl_log
    from tests.test_nccl_graph_load import BUS, CANDIDATE, nccl_log

    summary = summarize_nccl_log(NCCL_LOG, set())
    assert summary["graphs"] and summary["findings"]
    record = copy.deepcopy(next(r for r in make_records("whole") if r.get("nccl")))
    record["nccl"] = {**summary, "graph_file": check_loaded(nccl_log("/g.xml"), CANDIDATE.text, "/g.xml", BUS)}
    record["spacing"] = {"compute": "uniform:500", "skew": "rank 1 late by 1000 µs"}
    written = json.loads(json.dumps(record))
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(written) + "\n")
    assert read_records(results) == [written]
