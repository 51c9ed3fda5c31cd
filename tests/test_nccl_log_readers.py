"""The NCCL log reader on lines in NCCL's own format: Trees, the topology's CPU, NCCL 2.30's duplicate-GPU refusal,
the P2P level as NCCL reads it, node counts, and the Turin finding only where its cause can be."""

from __future__ import annotations

from pathlib import Path

from commprof.nccl_log.command import format_explanation
from commprof.nccl_log.findings import find_problems
from commprof.nccl_log.parse import parse_nccl_log
from commprof.nccl_tuning import p2p_level
from commprof.nccl_vocab import c_strtol, nccl_user_p2p_level

LOGS = Path(__file__).parent / "fixtures" / "nccl_log"


def _parse(name: str):
    summary = parse_nccl_log((LOGS / name).read_text(encoding="utf-8"))
    return summary, {f.id: f for f in find_problems(summary)}


def test_trees_lines_are_read_from_real_and_written_logs():
    summary, _ = _parse("real-2.19-per-rank-rings-two-nodes.log")
    rank1 = [t for t in summary.trees if t["rank"] == 1]
    assert len(rank1) == 8 and rank1[1] == {"rank": 1, "channel": 1, "down": [0, 3], "up": -1}
    assert rank1[0] == {"rank": 1, "channel": 0, "down": [], "up": 0}
    text = format_explanation(summary, [])
    assert "trees: 8 channel(s)" in text and "parent 0" in text


def test_the_turin_finding_needs_p2p_rings_and_says_what_it_knows_of_the_cpu():
    # NCCL_P2P_DISABLE=1: the SYS graph is of host-memory rings; the finding is P2P being off, not the graph.
    _, found = _parse("nccl-2.28-p2p-disabled-sys-graph.log")
    assert "turin_graph" not in found and "p2p_disabled" in found
    assert "unset NCCL_P2P_DISABLE" in found["p2p_disabled"].fix
    # The log shows an AMD CPU: a warning, with the CPU line as evidence.
    summary, found = _parse("nccl-2.28-amd-cpu-turin-graph.log")
    assert summary.cpu_vendor == "AMD"
    assert found["turin_graph"].severity == "warn" and "CPU/0-0 (1/2/-1)" in " ".join(found["turin_graph"].evidence)
    # The log says nothing of the CPU: information, asking to check it.
    _, found = _parse("nccl-2.28-turin-tuner-ll128.log")
    assert found["turin_graph"].severity == "info" and "does not show the CPU" in found["turin_graph"].text
    # An Intel CPU in the log rules it out.
    text = (LOGS / "nccl-2.28-amd-cpu-turin-graph.log").read_text(encoding="utf-8").replace("(1/2/-1)", "(1/1/4)")
    assert "turin_graph" not in {f.id for f in find_problems(parse_nccl_log(text))}


def test_nccl_2_30s_duplicate_gpu_refusal_is_recognised():
    summary, found = _parse("nccl-2.30-multi-rank-gpu.log")
    assert "duplicate_gpu" in found and "Multiple Ranks are using the same GPU" in found["duplicate_gpu"].evidence[0]
    assert "unknown_warning" not in found
    _, older = _parse("nccl-2.27-warnings.log")
    assert "duplicate_gpu" in older


def test_net_connections_are_no_node_count_where_nccl_prints_none():
    summary, _ = _parse("real-2.6-ring-busid-net.log")  # prefix-less lines, "[send] via NET/IB/1/GDRDMA"
    assert summary.hosts == [] and summary.nnodes is None  # NET also runs within one node (separate containers)
    assert _parse("real-2.5-ring-ipc-multinode.log")[0].nnodes is None  # host names alone: unknown
    assert _parse("nccl-2.27-8gpu-pcie.log")[0].nnodes == 1  # NCCL's own nNodes


def test_p2p_level_as_nccl_reads_it():
    summary, _ = _parse("nccl-2.27-8gpu-p2p-disabled.log")  # "NCCL_P2P_DISABLE set by environment to 1"
    assert summary.p2p_level == "LOC"
    for value, level in (("NVB", "NVB"), ("C2C", "C2C"), ("PXN", "PXN"), ("P2C", "P2C"), ("3", "PHB"), ("9", "SYS")):
        assert nccl_user_p2p_level({"NCCL_P2P_LEVEL": value}).level == level
        assert p2p_level(value) == value  # a sweep accepts what NCCL accepts
    assert nccl_user_p2p_level({"NCCL_P2P_LEVEL": "sys"}) is None  # NCCL's strcmp: ignored
    assert nccl_user_p2p_level({"NCCL_P2P_DISABLE": "2"}) is None  # disabled only on 1
    assert nccl_user_p2p_level({"NCCL_P2P_DISABLE": "0x1"}).level == "LOC"
    assert (c_strtol(" 010"), c_strtol("0x1f"), c_strtol("true"), c_strtol("-3")) == (8, 31, None, -3)
