"""NCCL INFO log parsing against real log lines and lines written from NCCL's format strings (tests/fixtures/nccl_log)."""

import json
from pathlib import Path

from commprof.nccl_log.parse import choice_matches, parse_nccl_log

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_log"


def parse(name):
    return parse_nccl_log((FIXTURES / name).read_text())


def test_pcie_box_with_default_p2p_level():
    s = parse("nccl-2.27-8gpu-pcie.log")
    assert s.version == "2.27.3+cuda12.9"
    # Ring 0..7 on 2 channels: the 8 PIX hops use P2P, the 8 NODE / SYS hops are staged through SHM.
    assert s.transports == {"P2P": 8, "SHM": 8}
    assert s.peer_transports["0->1"] == ["P2P/CUMEM/read"]
    assert s.peer_transports["1->2"] == ["SHM/direct/direct"]
    assert s.channels == 2
    assert s.channel_counts == {"coll": 2, "collnet": 2, "nvls": 0, "p2p": 2, "p2p_per_peer": 2}
    assert s.rings == [[0, 1, 2, 3, 4, 5, 6, 7]]
    ring, tree = s.graphs
    assert (ring["kind"], ring["channels"], ring["bw_intra_gbps"], ring["type_intra"]) == ("ring", 2, 12.0, "SYS")
    assert tree["kind"] == "balanced_tree"
    assert (s.nranks, s.nnodes) == (8, 1)


def test_tuning_choices_are_counted_once_per_distinct_choice():
    s = parse("nccl-2.27-8gpu-pcie.log")
    first = s.choices[0]
    assert first == {
        "coll": "AllReduce",
        "bytes": 14336,
        "algo": "RING",
        "proto": "LL",
        "channels": 1,
        "bytes_scope": "per_rank",
        "count": 3,
    }
    assert [c["bytes"] for c in s.choices] == [14336, 229376, 67108864, 1835008]
    assert s.choices[1]["channels"] == 2


def test_old_numeric_tuning_format_ansi_codes_crlf_and_warnings():
    s = parse("nccl-2.21-2gpu-old-formats.log")
    assert s.version == "2.21.5+cuda12.4"
    assert s.transports == {"SHM": 4}  # the duplicated connection line is counted once
    assert s.p2p_level == "LOC"  # NCCL_P2P_DISABLE=1
    assert s.rings == [[0, 1]]
    assert s.choices[0] == {
        "coll": None,
        "bytes": 8192,
        "algo": "RING",
        "proto": "LL",
        "channels": None,
        "bytes_scope": "largest_buffer",
        "count": 2,
        "model_time_us": 13.4,
    }
    assert s.choices[1]["proto"] == "SIMPLE"
    assert s.warnings == ["Cuda failure 'peer access is not supported between these two devices'"]


def test_net_transport_and_2_23_tuning_lines():
    s = parse("nccl-2.23-net-tuning.log")
    assert s.transports == {"NET": 2, "P2P": 1}
    directions = {c["direction"] for c in s.connections if c["transport"] == "NET"}
    assert directions == {"send", "receive"}
    assert s.peer_transports["0->1"] == ["P2P/direct pointer/read"]
    assert [(c["coll"], c["algo"], c["proto"]) for c in s.choices] == [
        ("AllReduce", "TREE", "SIMPLE"),
        ("ReduceScatter", "PAT", "LL"),
    ]
    assert (s.nranks, s.nnodes) == (16, 2)


def test_channel_line_of_nccl_2_19_without_collnet():
    # src/init.cc of v2.19.3-1: "%d coll channels, %d nvls channels, %d p2p channels, %d p2p channels per peer"
    s = parse_nccl_log("h:1:1 [0] NCCL INFO 4 coll channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer")
    assert s.channel_counts == {"coll": 4, "nvls": 0, "p2p": 4, "p2p_per_peer": 2}


def test_unrelated_text_gives_an_empty_summary_that_serialises():
    s = parse_nccl_log("Traceback (most recent call last):\nNCCL INFO garbage -> via\n\x00\xff")
    d = s.to_dict()
    assert d["version"] is None and d["transports"] == {} and d["choices"] == [] and d["channels"] is None
    json.dumps(d)


# --- formats of real logs (tests/fixtures/nccl_log/SOURCES.md) -------------------------------------------------


def test_2_27_log_of_8_ranks_with_p2p_disabled():
    s = parse("nccl-2.27-8gpu-p2p-disabled.log")
    assert (s.version, s.nranks, s.nnodes) == ("2.27.3+cuda12.9", 8, 1)
    assert s.transports == {"SHM": 16} and s.p2p_level == "LOC"
    assert s.rings == [[0, 1, 2, 3, 4, 5, 6, 7]]  # also rebuilt from every rank's "Ring 00 : prev -> r -> next"
    # COLL lines of one rank only (rank 1 logs the same sequence): count x bf16 size
    assert [(o["coll"], o["count"], o["datatype"], o["bytes"]) for o in s.ops] == [
        ("AllReduce", 28672, "bfloat16", 57344),
        ("AllReduce", 28672, "bfloat16", 57344),
        ("AllReduce", 28672, "bfloat16", 57344),
        ("AllGather", 81536, "bfloat16", 163072),
    ]
    ring = s.tuning_table["AllReduce"]["RING/LL"]
    assert ring == {"latency_us": 34.6, "bw_gbps": 1.5}
    assert s.tuning_table["AllGather"]["TREE/LL"]["bw_gbps"] == 0.0  # disabled pairs have no bandwidth


def test_old_transport_lines_with_bus_ids_and_network_sides():
    s = parse("real-2.6-ring-busid-net.log")
    assert s.transports == {"P2P": 9, "NET": 2}
    first = s.connections[0]
    assert (first["src"], first["src_dev"], first["dst"], first["dst_dev"], first["via"]) == (
        12,
        "41000",
        11,
        "2d000",
        "P2P/IPC",
    )
    assert {c["direction"] for c in s.connections if c["transport"] == "NET"} == {"send"}


def test_host_names_are_no_node_count_when_nccl_prints_none():
    """Containers of several nodes may share a host name: without nNodes or host hashes the count is unknown."""
    s = parse("real-2.5-ring-ipc-multinode.log")
    assert len(s.hosts) == 4 and s.nnodes is None and s.nnodes_basis == "unknown" and s.transports == {"P2P": 19}


def test_ranks_from_init_complete_lines_and_pre_2_18_channel_line():
    s = parse("real-2.12-coll-channels-init-complete.log")
    assert s.nranks == 8 and s.nnodes is None and len(s.hosts) == 2
    assert s.channel_counts == {"coll": 2, "p2p": 2, "p2p_per_peer": 1}
    assert s.peer_transports["1->0"] == ["P2P/IPC/read"]
    assert s.peer_transports["3->6"] == ["NET/IB/0/GDRDMA"]


def test_per_rank_ring_lines_and_comm_lines_of_two_nodes():
    s = parse("real-2.19-per-rank-rings-two-nodes.log")
    assert (s.nranks, s.nnodes) == (4, 2)
    assert s.channel_counts["coll"] == 8 and s.channel_counts["collnet"] == 0
    assert s.rings == []  # only ranks 0 and 1 printed their hops: no ring can be closed from them


def test_line_prefixes_of_mpirun_ray_and_python_logging():
    assert parse("real-2.5-mpirun-prefix.log").version == "2.5.6+cuda10.2"
    ray = parse("real-ray-prefix-opcount.log")
    assert ray.nranks == 128 and ray.nnodes is None and len(ray.hosts) == 3
    assert ray.ops[0] == {
        "coll": "AllReduce",
        "op_count": 0x139D,
        "count": 7382228,
        "datatype": "float32",
        "bytes": 7382228 * 4,
        "comm": "0x78cfda045840",
        "nranks": 128,
    }
    logged = parse("real-python-logging-prefix-rings.log")
    assert logged.rings == [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_interleaved_lines_keep_the_last_message():
    s = parse("real-interleaved-torn-lines.log")
    assert s.peer_transports["7->3"] == ["P2P/IPC"]
    assert s.transports == {"P2P": 6}  # the prefix-less remainder of a torn line is not an NCCL line


def test_opcount_lines_of_all_gather_and_reduce_scatter_count_per_rank():
    s = parse("real-opcount-allgather-reducescatter.log")
    assert [(o["coll"], o["bytes"]) for o in s.ops] == [
        ("AllGather", 8388608),
        ("ReduceScatter", 8388608),
        ("AllGather", 8388608),
    ]


def test_tuning_tables_old_and_new_and_numeric_choices():
    old = parse("real-2.1x-latency-algbw-table.log")
    assert old.tuning_table["Broadcast"]["RING/SIMPLE"] == {"latency_us": 18.0, "bw_gbps": 3.0}
    new = parse("real-2.2x-tuning-table.log")
    assert new.tuning_table["AllGather"]["RING/SIMPLE"] == {"latency_us": 70.0, "bw_gbps": 21.3}
    assert new.tuning_table["AllGather"]["COLLNETDIRECT/SIMPLE"]["latency_us"] == 44.0
    numeric = parse("real-2.20-numeric-tuning.log")
    assert [(c["bytes"], c["algo"], c["proto"], c["count"]) for c in numeric.choices] == [
        (805306368, "RING", "SIMPLE", 3),
        (1026048, "RING", "SIMPLE", 1),
    ]


def test_speed_in_old_graph_lines_and_set_by_environment_with_a_full_stop():
    s = parse("real-2.6-speed-graph-old-table.log")
    assert [(g["kind"], g["bw_intra_gbps"], g["type_intra"]) for g in s.graphs][0] == ("ring", 21.0, "NVL")
    assert s.env == {"NCCL_MAX_NCHANNELS": "1", "NCCL_NTHREADS": "256"}


def test_p2p_common_device_and_warn_lines_with_source_position():
    assert parse("nccl-2.7-p2p-common-device.log").peer_transports["0->1"] == ["P2P/common device"]
    warned = parse("nccl-2.27-warnings.log")
    assert len(warned.warnings) == 3 and warned.warnings[0].startswith("Duplicate GPU detected")


# --- which TUNING choice belongs to which plan op ----------------------------------------------------------


def test_all_gather_choices_match_on_per_rank_input_from_2_24_and_on_output_before():
    # The logits all-gather of Kimi-K2.5 at TP 8, T = 4: 4 x 20384 bf16 per rank, 8 x that gathered.
    per_rank, gathered = 4 * 20384 * 2, 8 * 4 * 20384 * 2
    new = {"coll": "AllGather", "bytes": per_rank, "bytes_scope": "per_rank"}
    assert choice_matches(new, "all_gather", per_rank, gathered)
    assert not choice_matches({**new, "bytes": gathered}, "all_gather", per_rank, gathered)
    old = {"coll": "AllGather", "bytes": gathered, "bytes_scope": "largest_buffer"}
    assert choice_matches(old, "all_gather", per_rank, gathered)
    assert not choice_matches(new, "all_reduce", per_rank, per_rank)  # another collective
    unnamed = {"coll": None, "bytes": 57344, "bytes_scope": "largest_buffer"}
    assert choice_matches(unnamed, "all_reduce", 57344, 57344)


def test_reduce_scatter_choices_match_on_per_rank_output_from_2_24_and_on_input_before():
    # A reduce-scatter of [64, 7168] bf16 at TP 8: each rank sends the whole buffer and keeps an eighth of it;
    # NCCL >= 2.24 logs task->count x type size, the eighth (src/enqueue.cc, the TUNING line).
    whole, per_rank = 64 * 7168 * 2, 64 * 7168 * 2 // 8
    new = {"coll": "ReduceScatter", "bytes": per_rank, "bytes_scope": "per_rank"}
    assert choice_matches(new, "reduce_scatter", whole, per_rank)
    assert not choice_matches({**new, "bytes": whole}, "reduce_scatter", whole, per_rank)
    old = {"coll": "ReduceScatter", "bytes": whole, "bytes_scope": "largest_buffer"}
    assert choice_matches(old, "reduce_scatter", whole, per_rank)
