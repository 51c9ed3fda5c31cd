"""NCCL INFO log parsing against lines written from NCCL's own format strings (tests/fixtures/nccl_log)."""

import json
from pathlib import Path

from commprof.nccl_log import parse_nccl_log

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
    assert first == {"coll": "AllReduce", "bytes": 14336, "algo": "RING", "proto": "LL", "channels": 1, "count": 3}
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
