"""Proof that NCCL loaded a graph file, read from its INFO log; the sweep's run-time side of the nccl_graph axis."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from commprof.doctor.bundle import read_bundle
from commprof.nccl_graph.box import box_from_facts
from commprof.nccl_graph.candidates import build_candidates
from commprof.nccl_graph.load_check import check_loaded, nccl_gpu_id
from commprof.sweep.planning.points import baseline
from commprof.sweep.planning.spec import SweepPoint
from commprof.sweep.running.graph_run import dump_env, graph_env, graph_refusal, loaded_graph, prepare_graphs

BUNDLE = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
BOX = box_from_facts(read_bundle(BUNDLE))
CANDIDATE = next(c for c in build_candidates(BOX) if c.name == "ring-2ch-same-hop")
BUS = {g.index: g.bus_id for g in BOX.gpus}


def nccl_log(path: str, channels: int = 2, order: tuple[int, ...] = CANDIDATE.ring, bw: float = 31.5) -> str:
    """Rank 0's lines as NCCL 2.28's format strings print them (search.cc ncclTopoCompute, ncclTopoPrintGraph)."""
    prefix = "box:1234:1234 [0] NCCL INFO "
    gpus = " ".join(f"GPU/0-{nccl_gpu_id(BUS[d]):x}" for d in order)
    lines = [
        f"NCCL_GRAPH_FILE set by environment to {path}",
        "Loading graphs",
        f"Search 0 : {channels} channels loaded from XML graph",
        f"Pattern 4, crossNic 0, nChannels {channels}, bw {bw:f}/{bw:f}, type SYS/PIX, sameChannels 1",
        *[f"{c:2d} : {gpus}" for c in range(channels)],
        f"Search 1 : {channels} channels loaded from XML graph",
        f"Pattern 1, crossNic 0, nChannels {channels}, bw {bw:f}/{bw:f}, type SYS/PIX, sameChannels 1",
    ]
    return "\n".join(prefix + line for line in lines) + "\n"


def test_the_log_proves_the_file_was_loaded():
    assert nccl_gpu_id("0000:06:00.0") == 0x6000 and nccl_gpu_id("0000:f5:00.0") == 0xF5000
    check = check_loaded(nccl_log("/g.xml"), CANDIDATE.text, "/g.xml", BUS)
    assert check["loaded"] is True and check["sha256"] == CANDIDATE.sha256
    assert "Search 0 : 2 channels loaded from XML graph" in check["evidence"]


@pytest.mark.parametrize(
    "log, why",
    [
        (nccl_log("/other.xml"), "NCCL read NCCL_GRAPH_FILE=/other.xml"),
        (nccl_log("/g.xml", channels=1), "the file has 2 channels, NCCL loaded 1"),
        (nccl_log("/g.xml", bw=12.0), "at 12 GB/s"),
        (nccl_log("/g.xml", order=(1, 0, 2, 3, 4, 5, 6, 7)), "channel 0: NCCL's ring"),
        ("h:1:1 [0] enqueue.cc:1 NCCL WARN XML Import Channel : dev 8 not found.\n", "dev 8 not found"),
    ],
)
def test_a_log_that_shows_another_graph_is_no_proof(log, why):
    check = check_loaded(log, CANDIDATE.text, "/g.xml", BUS)
    assert check["loaded"] is False and why in check["why"]


def test_without_info_lines_the_load_is_unknown():
    check = check_loaded("", CANDIDATE.text, "/g.xml")
    assert check["loaded"] is None and "NCCL_DEBUG=INFO" in check["why"]


def _meta(run_dir: Path, hop_pcie_gen: int = 5) -> None:
    gpus = [
        {
            "index": g.index,
            "name": "RTX PRO 6000",
            "pci_bus_id": g.bus_id,
            "numa_node": g.socket,
            "pcie": {"gen_max": hop_pcie_gen, "width_max": 16},
        }
        for g in BOX.gpus
    ]
    pairs = [{"gpus": [a, b], "level": level} for (a, b), level in sorted(BOX.levels.items())]
    (run_dir / "meta.json").write_text(json.dumps({"run_id": "r", "topology": {"gpus": gpus, "pairs": pairs}}))


def test_run_writes_the_boxs_candidates_and_refuses_what_it_cannot_run(tmp_path):
    _meta(tmp_path, hop_pcie_gen=3)  # Gen3 x16: 15.8 GB/s a hop, so 2 and 4 channels only
    meta = json.loads((tmp_path / "meta.json").read_text())
    points = [baseline(), SweepPoint("p001", "g", "default", {"NCCL_GRAPH_FILE": "generated:ring-2ch-same-hop"}, {})]
    assert prepare_graphs(tmp_path, [baseline()], meta["topology"], None) is None  # no graph point, nothing written
    entry = prepare_graphs(tmp_path, points, meta["topology"], None)
    assert [c["channels"] for c in entry["candidates"]] == [2, 2, 2, 2, 4, 4, 4, 4]
    assert (tmp_path / "nccl-graphs" / "ring-2ch-same-hop.xml").is_file()
    assert graph_refusal(points[1].env, tmp_path) is None and graph_refusal({}, tmp_path) is None
    assert "not a candidate of this box" in graph_refusal({"NCCL_GRAPH_FILE": "generated:ring-8ch-same-hop"}, tmp_path)
    assert "NCCL would refuse it" in graph_refusal({"NCCL_GRAPH_FILE": str(tmp_path / "none.xml")}, tmp_path)
    seven = tmp_path / "seven.xml"
    seven.write_text(CANDIDATE.text.replace('      <gpu dev="0x7"/>\n', ""))
    assert "does not fit this box" in graph_refusal({"NCCL_GRAPH_FILE": str(seven)}, tmp_path)
    env = graph_env(points[1].env, tmp_path)
    assert env["NCCL_GRAPH_FILE"] == str(tmp_path / "nccl-graphs" / "ring-2ch-same-hop.xml")
    assert dump_env(tmp_path, 1) == {} and set(dump_env(tmp_path, 0)) == {"NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE"}


def test_a_points_record_carries_the_graphs_hash_and_load_check(tmp_path):
    _meta(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    env = {"NCCL_GRAPH_FILE": "generated:ring-2ch-same-hop"}
    prepare_graphs(tmp_path, [SweepPoint("p001", "g", "default", env, {})], meta["topology"], None)
    path = graph_env(env, tmp_path)["NCCL_GRAPH_FILE"]
    log = tmp_path / "nccl.rank0.log"
    log.write_text(nccl_log(path))
    graph = loaded_graph(env, tmp_path, log)
    written = Path(path).read_text()
    assert "built from this run's topology probe" in written
    assert graph["loaded"] is True and graph["sha256"] == hashlib.sha256(written.encode()).hexdigest()
    assert loaded_graph({}, tmp_path, log) is None


def test_interleaved_ranks_are_read_one_process_at_a_time():
    mine = nccl_log("/g.xml").splitlines()
    other = [line.replace("box:1234:1234 [0]", "box:999:999 [1]").replace("GPU/0-6000", "GPU/0-7000") for line in mine]
    # The other rank's first channel line lands right after my Pattern line.
    mixed = "\n".join([*mine[:4], other[4], *mine[4:], *other])
    assert check_loaded(mixed, CANDIDATE.text, "/g.xml", BUS)["loaded"] is True


def test_nccl_log_shows_the_ring_nccl_chose_by_bus_id():
    """Graph lines written from NCCL 2.27's format strings for the bundle's box: the ring by bus id, in order."""
    from commprof.nccl_log.parse import parse_nccl_log

    log = (Path(__file__).parent / "fixtures" / "nccl_log" / "nccl-2.27-8gpu-pcie.log").read_text()
    ring = parse_nccl_log(log).graphs[0]
    assert (ring["kind"], ring["channels"], ring["bw_intra_gbps"], ring["type_intra"]) == ("ring", 2, 12.0, "SYS")
    assert ring["gpus"][0] == [f"{nccl_gpu_id(BUS[i]):x}" for i in range(8)]
