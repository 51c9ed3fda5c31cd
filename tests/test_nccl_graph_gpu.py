"""NCCL itself: its topology and graph dumps, read by commprof's reader, and graph files it really loads."""

from __future__ import annotations

import pytest

from commprof.doctor.facts import Facts
from commprof.doctor.nccl_probe import run_probe
from commprof.doctor.topology_probe import probe_topology
from commprof.nccl_graph.box import box_from_facts
from commprof.nccl_graph.candidates import build_candidates
from commprof.nccl_graph.graph_file import RING_GRAPH_ID
from commprof.nccl_graph.load_check import check_loaded
from commprof.nccl_graph.nccl_reader import read_graph_file
from commprof.sweep.running.graph_run import GRAPH_DUMP, TOPO_DUMP, dump_env

pytestmark = [pytest.mark.gpu, pytest.mark.processes, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def topology():
    found = probe_topology()
    if not found["gpus"]:
        pytest.skip(f"no GPU: {found['reason']}")
    return found


def _bus_ids(topology):
    return {g["index"]: g["pci_bus_id"] for g in topology["gpus"]}


def test_nccls_own_dumps_parse_and_load_back(tmp_path, topology):
    """NCCL's writer (NCCL_GRAPH_DUMP_FILE) read by commprof's reader; then NCCL loads its own file back."""
    gpus = [g["index"] for g in topology["gpus"]]
    dumped = run_probe(gpus, dump_env(tmp_path, 0), 300, tmp_path / "dump.log")
    assert dumped["status"] == "ok", dumped.get("message")
    assert (tmp_path / TOPO_DUMP).read_text().lstrip().startswith("<system")
    text = (tmp_path / GRAPH_DUMP).read_text()
    read = read_graph_file(text)
    ring = next(g for g in read.graphs if g.id == RING_GRAPH_ID)
    assert ring.nchannels == len(ring.channels) >= 1
    assert all(set(c.gpus) <= set(gpus) for c in ring.channels)  # `dev` is the NVML index
    loaded = run_probe(gpus, {"NCCL_GRAPH_FILE": str(tmp_path / GRAPH_DUMP)}, 300, tmp_path / "load.log")
    assert loaded["status"] == "ok", loaded.get("message")
    log = (tmp_path / "load.log").read_text(errors="replace")
    check = check_loaded(log, text, str(tmp_path / GRAPH_DUMP), _bus_ids(topology))
    assert check["loaded"] is True, check


def test_a_generated_candidate_is_loaded_as_written(tmp_path, topology):
    if len(topology["gpus"]) < 2:
        pytest.skip("one GPU: a generated graph needs two GPUs or more")
    box = box_from_facts(Facts(origin="live", topology=topology))
    candidate = build_candidates(box)[0]
    path = tmp_path / f"{candidate.name}.xml"
    path.write_text(candidate.text)
    result = run_probe([g.index for g in box.gpus], {"NCCL_GRAPH_FILE": str(path)}, 300, tmp_path / "g.log")
    assert result["status"] == "ok", result.get("message")
    check = check_loaded(
        (tmp_path / "g.log").read_text(errors="replace"), candidate.text, str(path), _bus_ids(topology)
    )
    assert check["loaded"] is True, check
