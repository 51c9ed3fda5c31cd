"""NCCL Inspector dumps in their real formats (tests/fixtures/nccl_inspector): per size, and before vs after."""

import json
from pathlib import Path

from commprof.cli import main
from commprof.trace.inspector import compare, parse_json_lines, parse_prom, per_size, records_frame

DUMPS = Path(__file__).parent / "fixtures" / "nccl_inspector"


def frame(folder):
    rows = []
    for path in sorted((DUMPS / folder).iterdir()):
        if path.suffix == ".log":
            rows += parse_json_lines(path.read_text())[0]
        else:
            rows += parse_prom(path.read_text())
    return records_frame(rows)


def test_json_lines_per_collective_and_a_cut_line():
    rows, bad = parse_json_lines((DUMPS / "json-before" / "node-a-pid4102.log").read_text())
    assert bad == 1 and len(rows) == 21
    first = rows[0]
    assert (first["rank"], first["nranks"], first["coll"], first["bytes"], first["timing"]) == (
        1,
        8,
        "AllReduce",
        57344,
        "kernel_gpu",
    )
    sizes = per_size(frame("json-before"))
    assert list(zip(sizes["coll"], sizes["bytes"], sizes["ops"])) == [
        ("AllGather", 163072, 6),
        ("AllReduce", 57344, 36),
    ]
    assert sizes["algo_proto"].isna().all()  # the JSON records do not say


def test_prometheus_buckets_carry_algorithm_and_protocol():
    rows = parse_prom((DUMPS / "prom-after").glob("*.prom").__next__().read_text())
    allreduce = next(r for r in rows if r["coll"] == "AllReduce")
    assert (allreduce["bytes"], allreduce["bytes_upper"]) == (56 * 1024, 57 * 1024)
    assert (allreduce["algo"], allreduce["proto"], allreduce["time_us"], allreduce["busbw_gbs"]) == (
        "RING",
        "LL",
        25.7,
        3.9,
    )


def test_before_and_after_per_size():
    rows = {r["coll"]: r for r in compare(per_size(frame("json-before")), per_size(frame("json-after")))}
    ar = rows["AllReduce"]
    assert ar["time_us_after"] < ar["time_us_before"] and ar["change_pct"] < -30 and ar["clear"] is True
    prom = {r["coll"]: r for r in compare(per_size(frame("prom-before")), per_size(frame("prom-after")))}
    assert (prom["AllReduce"]["algo_proto_before"], prom["AllReduce"]["algo_proto_after"]) == ("RING/SIMPLE", "RING/LL")
    assert prom["AllReduce"]["clear"] is False  # means only: no spread to judge by
    assert prom["AllReduce"]["verdict"].startswith("too few records")
    assert ar["verdict"] == "beyond the spread of both runs"


def test_trace_command_reads_dumps_and_compares(capsys):
    assert main(["trace", str(DUMPS / "json-after"), "--before", str(DUMPS / "json-before"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    inspector = out["inspector"]
    assert inspector["records"] == 42 and inspector["unreadable_lines"] == 0
    assert {c["coll"] for c in inspector["before_after"]} == {"AllReduce", "AllGather"}
    assert main(["trace", str(DUMPS / "prom-after"), "--before", str(DUMPS / "prom-before")]) == 0
    text = capsys.readouterr().out
    assert "AllReduce" in text and "RING/SIMPLE -> RING/LL" in text
    no_dumps = Path(__file__).parent / "fixtures" / "sweeps"
    assert main(["trace", str(DUMPS / "json-after"), "--before", str(no_dumps)]) == 2
