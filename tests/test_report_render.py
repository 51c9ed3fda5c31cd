"""`commprof report` on run folders written per the results schema (SYNTHETIC numbers, tests/report_fixtures.py)."""

import json
import re

import pytest

from commprof.cli import main
from commprof.records import RESULTS_FILE
from tests.report_fixtures import base_points, make_meta, make_records, write_run


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """One realistic synthetic run rendered once for the tests that only read the output."""
    root = tmp_path_factory.mktemp("report")
    run_dir = write_run(root / "runs", "kimi-synth")
    out = root / "out"
    assert main([ "report", str(run_dir), "--out", str(out), "--compute-ms", "4=5.0,8=5.2", "--draft-ms", "0.8"]) == 0
    return out


def test_writes_every_file(rendered):
    for name in ("index.html", "summary.json", "results.csv", "recommend.env", "nccl_tuner.conf",
                 "engine_flags.txt", "nccl-tests/p000.txt", "nccl-tests/p001.txt"):
        assert (rendered / name).is_file(), name
    assert not (rendered / "nccl-tests" / "p009.txt").exists()        # unsupported: no timings
    lines = (rendered / "results.csv").read_text().splitlines()
    assert len(lines) == 1 + len(base_points()) * 4 * 2


def test_index_answers_the_three_questions(rendered):
    html = (rendered / "index.html").read_text()
    for text in ("What do I set?", "How much faster is my verify step?", "Does speculative decoding pay",
                 "NCCL_ALGO=Ring NCCL_PROTO=LL", "capture_failed", "timeout", "unsupported",
                 "CUDA-graph compatibility", "Topology: levels", "Doctor verdicts", "field report"):
        assert text in html, text
    assert "13 of 80 records failed" in html
    assert "SIMULATED" not in html
    assert not re.search(r">\s*nan\s*<|NaN", html)
    assert "<script" not in html                                      # self-contained: nothing to fetch
    assert not re.search(r'(src|href)="(https?:)?//|url\((https?:)?//|@import', html)
    assert html.count("<svg") == 3                                    # breakdown, op sites, projection


def test_summary_json(rendered):
    summary = json.loads((rendered / "summary.json").read_text())
    run = summary["runs"][0]
    assert run["source"] == "measured" and run["mode"] == "graph" and not run["simulated"]
    assert run["recommended"]["env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    by_t = {row["tokens"]: row for row in run["headline"]}
    assert by_t[16]["best_point_id"] == "p003" and by_t[16]["saved_pct"] > 0
    assert run["projection"] and run["projection_label"].startswith("Estimate")
    assert run["status_counts"]["capture_failed"] == 12


def test_nccl_tests_table_lists_each_size(rendered):
    text = (rendered / "nccl-tests" / "p001.txt").read_text()
    sizes = [int(line.split()[0]) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert sorted(sizes) == sorted([14336, 57344, 114688, 229376] + [327680, 1310720, 2621440, 5242880])


def test_simulated_run_is_labelled_everywhere(tmp_path):
    run_dir = write_run(tmp_path, "sim", source="model")
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "SIMULATED" in html and "banner sim" in html
    assert "SIMULATED" in (out / "recommend.env").read_text()
    assert "communication only" in html                             # no --compute-ms given
    assert json.loads((out / "summary.json").read_text())["runs"][0]["simulated"] is True


def test_measured_and_simulated_side_by_side(tmp_path):
    measured = write_run(tmp_path, "before")
    simulated = write_run(tmp_path, "model-run", source="model")
    out = tmp_path / "cmp"
    assert main(["report", str(measured), str(simulated), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "Runs side by side" in html and "before (measured)" in html
    assert "model-run (simulated (cost model))" in html
    assert (out / "before" / "recommend.env").is_file() and (out / "model-run" / "nccl_tuner.conf").is_file()


def test_every_point_failed_still_renders(tmp_path):
    records = make_records("bad")
    for record in records:
        record.update(status="crashed", message="worker 3 died: SIGSEGV", step_us=None, op_us=None)
    run_dir = write_run(tmp_path, "bad", records=records)
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "every point failed" in html and "SIGSEGV" in html
    assert "No point passed" in (out / "recommend.env").read_text()


def test_gloo_run_uses_eager_mode_and_says_so(tmp_path):
    points = [{"label": "gloo defaults", "impl": "gloo", "env": {}, "options": {}}]
    records = make_records("gloo", points=points, tokens=(1, 4))
    for record in records:
        record["backend"] = "gloo"
        if record["mode"] == "graph":
            record.update(status="unsupported", message="gloo has no CUDA graphs", step_us=None, op_us=None)
    run_dir = write_run(tmp_path, "gloo", records=records, meta=make_meta("gloo", with_topology=False))
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "headline uses eager mode" in html and "gloo has no CUDA graphs" in html
    assert "No topology in meta.json" in html
    assert json.loads((out / "summary.json").read_text())["runs"][0]["mode"] == "eager"


def test_imported_collectives_only(tmp_path):
    rows = [{"schema": 1, "kind": "collective", "source": "nccl-tests", "run_id": "imp", "point_id": "p000",
             "point": {"label": "all_reduce_perf", "impl": "nccl", "env": {}, "options": {}}, "backend": None,
             "world_size": 8, "status": "ok", "message": None, "time": "t", "calibration": None,
             "collective": "all_reduce", "bytes": size, "count": size // 4, "dtype": "float", "redop": "sum",
             "in_place": False, "graph": False, "time_us": 40.0 + size / 1e4, "algbw_gbps": 0.1,
             "busbw_gbps": 0.2, "wrong": 0, "file": "x.txt", "line": i}
            for i, size in enumerate((8, 1024, 65536))]
    run_dir = write_run(tmp_path, "imp", records=rows)
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "imported from nccl-tests" in html and "Single collectives" in html and "65536" in html


def test_doctor_as_a_dict_and_unknown_topology_shape(tmp_path):
    meta = make_meta("odd")
    meta["doctor"] = {"checks": {"p2p": {"verdict": "FAIL", "why": "no P2P"}, "nvml": "ok"}}
    meta["topology"] = {"numa": [0, 0, 1, 1], "links": {"GPU0": "Gen5 x16"}}
    run_dir = write_run(tmp_path, "odd", meta=meta)
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "verdict-fail" in html and "no P2P" in html and "Gen5 x16" in html


def test_options_from_the_sweep_file(tmp_path):
    meta = make_meta("sw")
    meta["sweep"] = {"path": "s.toml", "report": {"compute_ms": {"4": 5.0}, "accept_lengths": [1.5], "draft_ms": 1}}
    run_dir = write_run(tmp_path, "sw", meta=meta)
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    run = json.loads((out / "summary.json").read_text())["runs"][0]
    assert run["accepts"] == [1.5] and run["draft_ms"] == 1.0 and run["compute_ms"] == "T=4: 5 ms"
    assert main(["report", str(run_dir), "--out", str(out), "--accept", "2,3"]) == 0    # the command line wins
    assert json.loads((out / "summary.json").read_text())["runs"][0]["accepts"] == [2.0, 3.0]


def test_latest_picks_the_newest_run(tmp_path, monkeypatch):
    write_run(tmp_path / "runs", "old", meta={**make_meta("old"), "created": "2026-01-01T00:00:00Z"})
    write_run(tmp_path / "runs", "new", meta={**make_meta("new"), "created": "2026-02-01T00:00:00Z"})
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--latest", "runs"]) == 0
    assert (tmp_path / "reports" / "new" / "index.html").is_file()


def one_line_error(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(match, err), err


def test_robustness_one_clear_line_each(tmp_path, capsys):
    one_line_error(capsys, ["report", str(tmp_path / "nope")], "no such run directory")
    (tmp_path / "notarun").mkdir()
    one_line_error(capsys, ["report", str(tmp_path / "notarun")], "no results.jsonl")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / RESULTS_FILE).write_text("")
    one_line_error(capsys, ["report", str(empty)], "empty, no records")
    old = write_run(tmp_path, "old", records=[{**r, "schema": 0} for r in make_records("old")[:2]])
    one_line_error(capsys, ["report", str(old)], "schema version 0")
    good = write_run(tmp_path, "good")
    one_line_error(capsys, ["report", str(good), "--compute-ms", "4=fast"], "compute-ms")
    one_line_error(capsys, ["report", str(good), "--accept", "0.5"], "accept")
    one_line_error(capsys, ["report", str(good), "--baseline", "p999"], "baseline point 'p999'")
    one_line_error(capsys, ["report"], "give a run folder")
    one_line_error(capsys, ["report", "--latest", str(tmp_path / "norun")], "no such directory")


def test_truncated_last_line_warns_and_renders(tmp_path, capsys):
    run_dir = write_run(tmp_path, "cut")
    with open(run_dir / RESULTS_FILE, "a") as handle:
        handle.write('{"schema": 1, "kind": "st')
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "truncated last line" in err
    assert (tmp_path / "out" / "index.html").is_file()
