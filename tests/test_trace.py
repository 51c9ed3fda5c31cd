"""`commprof trace` on real Kineto traces (tests/fixtures/traces) and on made-up event tables for the edge cases."""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from commprof.cli import main
from commprof.planner.models import load_model
from commprof.planner.plan import build_step_plan
from commprof.trace.analysis import TraceAnalysis
from commprof.trace.events import load_trace, load_traces, trace_from_dict
from commprof.trace.plan_check import compare_with_plan, plan_signature
from commprof.trace.steps import assign_steps, compute_overlap, find_period, rank_skew

TRACES = Path(__file__).parent / "fixtures" / "traces"
ALLREDUCE_2RANK = TRACES / "hta-nccl-allreduce-a100-2rank.trimmed.json.gz"
RANK3_OF_8 = TRACES / "hta-rank3-of-8-a100.trimmed.json.gz"


def test_nccl_kernels_with_collective_arguments():
    account = TraceAnalysis([load_trace(ALLREDUCE_2RANK)]).account()
    assert account["traces"][0]["rank"] == 0 and account["traces"][0]["nccl_version"] == "2.17.1"
    steps = account["steps"]
    assert (steps["found_by"], steps["count"], steps["alike"], steps["collectives_per_step"]) == (
        "3 ProfilerStep annotations",
        3,
        3,
        7,
    )
    kinds = [(c["kind"], c["bytes_in"], c["dtype"]) for c in account["step"]["collectives"]]
    # "In msg nelems" x the dtype's size: 53120 fp32 and 53 int64 broadcasts, then 5 fp32 all-reduces.
    assert kinds[:3] == [
        ("broadcast", 53120 * 4, "Float"),
        ("broadcast", 53 * 8, "Long"),
        ("all_reduce", 2049000 * 4, "Float"),
    ]
    assert sum(c["per_step"] for c in account["step"]["collectives"]) == 7
    assert 10 < account["overlap_pct"][0] < 20


def test_older_kernels_take_kind_and_size_from_the_nccl_annotation():
    account = TraceAnalysis([load_trace(RANK3_OF_8)]).account()
    assert account["traces"][0]["rank"] == 3
    assert (account["steps"]["alike"], account["steps"]["collectives_per_step"]) == (6, 10)
    rows = account["step"]["collectives"]
    assert [r["kind"] for r in rows].count("all_to_all") == 7  # SendRecv kernels under nccl:all_to_all
    first = rows[0]
    assert (first["kind"], first["bytes_in"], first["dtype"]) == ("all_to_all", 8 * 1024 * 8816 * 4, "float")
    varying = [r for r in rows if r["bytes_out_max"] != r["bytes_out"]]
    assert varying, "data-dependent all-to-all sizes change from step to step"


def test_whole_trace_overlap_is_exact_interval_arithmetic():
    trace = load_trace(ALLREDUCE_2RANK)
    kernels = pd.DataFrame(
        {
            "name": ["ncclKernel_AllReduce", "gemm", "gemm"],
            "cat": ["kernel"] * 3,
            "ts": [0.0, 50.0, 90.0],
            "dur": [100.0, 20.0, 30.0],
        }
    )
    comm = kernels.iloc[:1].assign(dur=100.0)
    assert compute_overlap(comm, kernels) == pytest.approx(30.0)  # 50-70 and 90-100 of 0-100
    assert compute_overlap(comm, kernels.iloc[:0]) is None
    assert compute_overlap(TraceAnalysis([trace]).collectives[0], trace.events) == pytest.approx(15.609, abs=0.01)


def _ops(kinds_sizes, issued, rank=0):
    return pd.DataFrame(
        {
            "rank": rank,
            "kind": [k for k, _ in kinds_sizes],
            "bytes_in": [b for _, b in kinds_sizes],
            "bytes_out": [b for _, b in kinds_sizes],
            "issued": issued,
            "ts": issued,
            "dur": 1.0,
            "dtype": "bf16",
            "group_size": 2,
        }
    )


def test_repeating_step_without_profiler_annotations_cuts_at_the_longest_pause():
    step = [("all_reduce", 8), ("all_reduce", 8), ("all_gather", 32)]
    # The trace starts mid-step (after the first all-reduce); steps are 100 µs apart, ops 1 µs apart.
    seq, issued, t = [], [], 0.0
    for _ in range(3):
        for op in step:
            seq.append(op)
            issued.append(t)
            t += 1.0
        t += 100.0
    ops = _ops(seq[1:], issued[1:])
    assert find_period(ops) == (3, 2)
    stepped, how = assign_steps(ops, pd.DataFrame(columns=["name", "ts", "dur"]))
    assert how == "a repeating pattern of 3 collectives"
    assert stepped.groupby("step").size().tolist() == [3, 3]
    assert list(stepped[stepped["step"] == 0]["kind"]) == ["all_reduce", "all_reduce", "all_gather"]


def test_no_pattern_is_one_step_and_skew_splits_waiting_from_the_wire():
    ops = _ops([("all_reduce", 8), ("broadcast", 4), ("all_gather", 2)], [0.0, 1.0, 2.0])
    stepped, how = assign_steps(ops, pd.DataFrame(columns=["name", "ts", "dur"]))
    assert how.startswith("no repeating pattern") and set(stepped["step"]) == {0}
    a = _ops([("all_reduce", 8)], [0.0]).assign(step=0, dur=10.0)
    b = _ops([("all_reduce", 8)], [4.0], rank=1).assign(step=0, dur=6.0)
    skew = rank_skew({0: a, 1: b}, [0])
    # Rank 0 waits 4 µs for rank 1; both then spend 6 µs on the wire.
    assert (skew["wait_us"], skew["wire_us"], skew["max_op_start_skew_us"]) == (2.0, 6.0, 4.0)


def test_plan_comparison_names_each_difference():
    plan = build_step_plan(load_model("kimi-k2.5"), 2, 4)
    expected = plan_signature(plan)
    assert compare_with_plan(expected, plan, {2})["plan_match"] is True
    result = compare_with_plan(expected[:-1] + (("all_gather", 1, 2),), plan, {8})
    assert result["plan_match"] is False
    whats = [d["what"] for d in result["differences"]]
    assert whats[0] == "group size" and any("all_gather of 655360 B in" in w for w in whats)
    swapped = (expected[-1],) + expected[:-1]
    assert compare_with_plan(swapped, plan, {2})["differences"][0]["what"] == "order"


def test_command_on_each_real_trace_and_its_bad_inputs(capsys, tmp_path):
    for path in (ALLREDUCE_2RANK, RANK3_OF_8):
        assert main(["trace", str(path)]) == 0
        assert "collectives each" in capsys.readouterr().out
    assert main(["trace", str(ALLREDUCE_2RANK), "--json", "--model", "kimi-k2.5", "--tokens", "4"]) == 0
    account = json.loads(capsys.readouterr().out)
    assert account["plan_match"] is False and account["plan"]["tp"] == 2  # the trace's group size
    assert main(["trace", str(tmp_path / "none.json")]) == 2
    (tmp_path / "bad.json").write_text("{}")
    assert main(["trace", str(tmp_path / "bad.json")]) == 2
    assert "not a Kineto trace" in capsys.readouterr().err
    assert main(["trace", str(ALLREDUCE_2RANK), "--tokens", "4"]) == 2
    assert main(["trace", str(ALLREDUCE_2RANK), str(ALLREDUCE_2RANK)]) == 2  # two traces of rank 0


def test_gzip_is_recognised_by_content_and_traces_without_rank_are_numbered(tmp_path):
    data = json.loads(gzip.decompress(ALLREDUCE_2RANK.read_bytes()))
    data.pop("distributedInfo")
    plain = tmp_path / "no-rank.json"
    plain.write_text(json.dumps(data))
    named_json = tmp_path / "gzipped.json"
    named_json.write_bytes(ALLREDUCE_2RANK.read_bytes())
    traces = load_traces([named_json, plain])  # no rank: numbered by its place among the arguments
    assert [(Path(t.path).name, t.rank) for t in traces] == [("gzipped.json", 0), ("no-rank.json", 1)]
    assert trace_from_dict(data, "x", 5).rank == 5


def test_hta_cross_check_agrees_within_its_rounding():
    pytest.importorskip("hta.trace_analysis", reason="Holistic Trace Analysis (commprof[trace]) is not installed")
    from commprof.trace.hta import hta_overlap

    ours = TraceAnalysis([load_trace(ALLREDUCE_2RANK)])
    theirs = hta_overlap([ALLREDUCE_2RANK])
    exact = compute_overlap(ours.collectives[0], ours.traces[0].events)
    # HTA rounds kernel starts up and ends down to whole µs: about a point less on this trace's short kernels.
    assert abs(theirs[0] - exact) < 2.0
