"""nccl-tests log parsing and `commprof import-nccl-tests`, on real posted logs and documented formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel.nccl_tests import parse_json, parse_text
from commprof.errors import UsageError
from commprof.records.files import read_records

FIXTURES = Path(__file__).parent / "fixtures" / "nccl-tests"
LOG_8GPU = FIXTURES / "rtx4090x8_sys_noP2P_charlie0129.txt"
LOG_KALAVAI = FIXTURES / "rtx4090x2_x4_kalavai.txt"


def parse(path: Path):
    return parse_text(path.read_text(), str(path))


def test_real_8gpu_log_one_run_in_prose():
    log = parse(LOG_8GPU)
    assert log.warnings == []
    (run,) = log.runs
    assert (run.collective, run.ranks, run.nthread, run.ngpus, run.graph) == ("all_reduce", 8, 1, 8, False)
    assert (run.iterations, run.warmup) == (20, 5)
    assert len(run.rows) == 25 and len(run.devices) == 8
    assert run.avg_busbw_gbps == pytest.approx(4.85265)
    assert run.out_of_bounds == 0
    first, at_128k, last = run.rows[0], run.rows[14], run.rows[-1]
    assert (first.bytes, first.count, first.dtype, first.redop, first.root) == (8, 2, "float32", "sum", -1)
    assert first.places["out_of_place"]["time_us"] == 38.83 and first.places["in_place"]["time_us"] == 40.43
    assert at_128k.bytes == 131072
    assert at_128k.places["out_of_place"] == {"time_us": 67.27, "algbw_gbps": 1.95, "busbw_gbps": 3.41, "wrong": 0}
    assert at_128k.places["in_place"]["time_us"] == 54.86
    assert (last.bytes, last.places["out_of_place"]["time_us"], last.line) == (134217728, 16253.0, 50)


def test_real_log_with_four_runs_each_its_own_gpu_count():
    log = parse(LOG_KALAVAI)
    assert log.warnings == []  # shell commands, YAML and prose around the tables are not rows
    assert [r.ranks for r in log.runs] == [2, 4, 2, 4]
    assert [len(r.rows) for r in log.runs] == [29, 29, 29, 29]
    assert [r.avg_busbw_gbps for r in log.runs] == [1.18707, 1.40135, 1.96915, 1.40254]
    assert log.runs[1].rows[-1].bytes == 2147483648
    assert log.runs[1].rows[-1].places["out_of_place"]["time_us"] == 1246110.0
    assert log.runs[3].rows[0].places["in_place"]["time_us"] == 18.75


def test_per_iteration_columns_and_na_wrong():
    log = parse(FIXTURES / "synthetic_per_iter_I1.txt")
    assert log.warnings == []
    (run,) = log.runs
    assert (run.collective, run.ranks, run.ngpus) == ("all_gather", 8, 1)  # 8 "Using devices" lines
    row = run.rows[1]
    assert row.bytes == 16384 and row.redop == "none"
    oop = row.places["out_of_place"]
    assert oop["wrong"] is None  # -c 0 prints N/A
    assert oop["time_us"] == 22.40
    assert oop["per_iteration"] == {"min_us": 21.70, "max_us": 30.20, "p99_us": 29.50, "cv_pct": 9.80}
    assert row.places["in_place"]["time_us"] == 22.00


def test_json_output():
    path = FIXTURES / "synthetic_output_J.json"
    log = parse_text(path.read_text(), str(path))  # parse_text hands JSON to parse_json
    (run,) = log.runs
    assert (run.collective, run.ranks, run.avg_busbw_gbps) == ("all_reduce", 4, 0.612)
    assert [r.bytes for r in run.rows] == [1024, 2048]
    assert run.rows[0].dtype == "bfloat16" and run.rows[0].root == -1
    assert run.rows[0].places["in_place"]["per_iteration"]["cv_pct"] == 4.5
    assert run.rows[1].places["out_of_place"]["wrong"] == 0
    assert any("results[2]" in w and "time" in w for w in log.warnings)  # the NaN time is reported, not dropped


def test_broken_lines_are_reported_with_line_numbers():
    text = LOG_8GPU.read_text().splitlines()
    # line 30 (8192 B) loses its last fields; an orphan row appears after the table
    text[29] = "        8192          2048     float     sum      -1    44.02    0.19"
    text.append("    4096   1024  float  sum  -1  43.18  0.09  0.17  0  42.69  0.10  0.17  0")
    log = parse_text("\n".join(text) + "\n", "pasted.txt")
    assert len(log.runs[0].rows) == 24
    assert any(w.startswith("pasted.txt:30: unreadable table line") for w in log.warnings)
    assert any(w.startswith(f"pasted.txt:{len(text)}: looks like a result row") for w in log.warnings)


def test_timestamp_column_and_mpi_tags():
    text = "\n".join(
        [
            "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 5 "
            "agg iters: 1 validation: 1 graph: 1",
            "[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
            "   algbw   busbw #wrong           timestamp",
            "[1,0]<stdout>:           8             2     float     sum      -1    10.00    0.00    0.00      0    11.00"
            "    0.00    0.00      0 2026-11-20 10:00:01",
        ]
    )
    (run,) = parse_text(text, "mpi.txt").runs
    assert run.graph is True and run.ranks == 1
    assert run.rows[0].places["in_place"]["time_us"] == 11.0


def test_file_without_table_is_an_error_naming_it():
    with pytest.raises(UsageError, match="notes.md: no nccl-tests result table"):
        parse_text("We ran all_reduce_perf and it was fast.\n", "notes.md")
    with pytest.raises(UsageError, match="x.json: no nccl-tests results"):
        parse_json('{"version": 3, "results": []}', "x.json")


def test_import_command_writes_a_run_folder(tmp_path, capsys):
    assert main(["import-nccl-tests", str(LOG_8GPU), str(LOG_KALAVAI), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.endswith("-nccl-tests")
    records = read_records(run_dir / "results.jsonl")
    assert len(records) == 2 * (25 + 4 * 29)
    first = records[0]
    assert first["kind"] == "collective" and first["source"] == "nccl-tests" and first["world_size"] == 8
    assert (first["bytes"], first["time_us"], first["in_place"], first["line"]) == (8, 38.83, False, 26)
    assert first["file"] == str(LOG_8GPU) and first["point_id"] == "p000" and first["status"] == "ok"
    assert {r["point_id"] for r in records} == {"p000", "p001", "p002", "p003", "p004"}
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["run_id"] == run_dir.name and meta["source"] == "nccl-tests"
    assert [run["ranks"] for item in meta["imported"] for run in item["runs"]] == [8, 2, 4, 2, 4]
    assert "wrote" in capsys.readouterr().out


def test_an_imported_report_says_where_the_logs_came_from_not_where_they_were_imported(tmp_path):
    assert main(["import-nccl-tests", str(LOG_8GPU), "--out", str(tmp_path / "runs")]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    use, *head = (tmp_path / "report" / "recommend.env").read_text().splitlines()[:3]
    assert use.startswith("# Use: source recommend.env")
    assert head[0].endswith(f"{run_dir.name}: imported from {LOG_8GPU.name}")
    assert head[1].startswith("# Imported from nccl-tests logs of: 8 x NVIDIA GeForce RTX 4090, world size 8, ")
    assert "backend NCCL; imported on host " in head[1]


def test_import_command_refuses_a_file_without_table(tmp_path, capsys):
    prose = tmp_path / "prose.md"
    prose.write_text("no table here\n")
    assert main(["import-nccl-tests", str(prose), "--out", str(tmp_path / "runs")]) == 2
    assert "prose.md: no nccl-tests result table found" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("bad", ["-8.97", "inf"])
def test_import_refuses_a_negative_or_infinite_time_naming_file_and_line(tmp_path, capsys, bad):
    lines = LOG_KALAVAI.read_text().splitlines()
    lines[29] = lines[29].replace("     8.97 ", f" {bad:>8} ", 1)  # line 30: the first row of the first table
    log = tmp_path / "edited.txt"
    log.write_text("\n".join(lines) + "\n")
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    why = "is negative" if bad.startswith("-") else "is not a latency"
    assert f"edited.txt:30: time {bad} {why}, which no measurement gives" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("           8             2 ", "       -1024             2 ", "size -1024 is out of range"),
        ("     8.97 ", "     0.00 ", "time 0.00 is zero"),
        ("           8             2 ", " 99999999999999999999999999999999999999999             2 ", "is out of range"),
    ],
)
def test_import_refuses_a_negative_size_or_a_zero_time_naming_file_and_line(tmp_path, capsys, old, new, why):
    lines = LOG_KALAVAI.read_text().splitlines()
    assert old in lines[29]
    lines[29] = lines[29].replace(old, new, 1)
    log = tmp_path / "edited.txt"
    log.write_text("\n".join(lines) + "\n")
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "edited.txt:30: " in err and why in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_import_refuses_nan_in_a_json_log_and_leaves_no_folder(tmp_path, capsys):
    text = (FIXTURES / "synthetic_output_J.json").read_text().replace('"time":12.25', '"time":NaN', 1)
    log = tmp_path / "nan.json"
    log.write_text(text)
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "runs")]) == 2
    assert "nan.json: results[0]: time nan is not a latency, which no measurement gives" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# Two nodes of 2 GPUs (the rank lines' "on <host>"), as nccl-tests built with MPI=1 prints under mpirun; its version
# and footer lines lost their "#" when pasted (a markdown renderer reads "#" as a heading).
TWO_NODES = """nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703
# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  1201 on   node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  1202 on   node-a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  3301 on   node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  3302 on   node-b device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    30.12    0.03    0.05      0    29.80    0.03    0.05      0
        2048           512     float     sum      -1    31.40    0.07    0.10      0    31.02    0.07    0.10      0
Out of bounds values : 0 OK
Avg bus bandwidth    : 0.075
"""


def test_a_two_node_log_imports_as_two_nodes_and_lines_without_hash_are_read(tmp_path, capsys):
    (run,) = parse_text(TWO_NODES, "two-nodes.txt").runs
    assert (run.ranks, run.nodes, run.nccl_version, run.avg_busbw_gbps, run.out_of_bounds) == (4, 2, "2.27.3", 0.075, 0)
    assert run.summary()["hosts"] == ["node-a", "node-b"] and len(run.rows) == 2
    log = tmp_path / "two-nodes.txt"
    log.write_text(TWO_NODES)
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "runs")]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["nnodes"] == 2 and meta["imported"][0]["runs"][0]["nodes"] == 2
    one_node = parse(LOG_8GPU).runs[0]
    assert one_node.nodes == 1  # one host named
    unnamed = TWO_NODES.replace("on   node-a", "on node").replace("on   node-b", "on node")
    assert parse_text(unnamed, "x.txt").runs[0].nodes == 1
    # A log whose rank lines were cut names no host: its node count is unknown, and so is the import's.
    bare = "\n".join(line for line in TWO_NODES.splitlines() if "Rank" not in line)
    assert parse_text(bare, "bare.txt").runs[0].nodes is None
    (tmp_path / "bare.txt").write_text(bare)
    assert main(["import-nccl-tests", str(tmp_path / "bare.txt"), "--out", str(tmp_path / "bare")]) == 0
    (bare_dir,) = (tmp_path / "bare").iterdir()
    assert "nnodes" not in json.loads((bare_dir / "meta.json").read_text())  # not stated: not written
    capsys.readouterr()


def test_json_output_names_its_hosts():
    text = (FIXTURES / "synthetic_output_J.json").read_text()
    (run,) = parse_json(text, "j.json").runs
    assert run.nodes == 1 and run.summary()["hosts"] == ["node01"]
