"""The `nccl_graph` axis at run time: the box's candidates written into the run folder before the first point, each
point's NCCL_GRAPH_FILE resolved and checked before its workers start, NCCL's own topology and graphs dumped by
the untimed probe, and the INFO log read for proof that NCCL loaded the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commprof.doctor.facts import Facts
from commprof.errors import UsageError
from commprof.nccl_graph.box import box_from_facts
from commprof.nccl_graph.candidates import build_candidates, check_against_box
from commprof.nccl_graph.command import INDEX_FILE, write_candidates
from commprof.nccl_graph.load_check import check_loaded
from commprof.nccl_graph.nccl_reader import GraphFileError, read_graph_file
from commprof.nccl_vocab import DUMP_VARIABLES
from commprof.records.meta_topology import probe_answer
from commprof.records.run_meta import RunMeta, as_written, read_meta
from commprof.sweep.planning.graph_axis import GRAPH_VARIABLE, GRAPHS_FOLDER, generated_name, graph_path
from commprof.textfiles import read_text

TOPO_DUMP, GRAPH_DUMP = "nccl-topo.xml", "nccl-graphs.xml"  # in the point folder: what NCCL detected and searched


def prepare_graphs(run_dir: Path, points, topology: dict | None, floor: dict | None) -> dict[str, Any] | None:
    """meta.json's "nccl_graphs": the candidates written for this box, or why there are none; None when no point
    runs a generated graph."""
    if not any(generated_name(p.env) for p in points):
        return None
    try:
        box = box_from_facts(Facts(origin="this run's topology probe", topology=topology, floor=floor))
        candidates = build_candidates(box)
        write_candidates(box, candidates, run_dir / GRAPHS_FOLDER)
    except (UsageError, GraphFileError, OSError) as exc:
        return {"folder": GRAPHS_FOLDER, "candidates": [], "why": str(exc)}
    return {"folder": GRAPHS_FOLDER, "candidates": [c.to_dict() for c in candidates], "box": box.to_dict()}


def graph_refusal(env: dict[str, str], run_dir: Path) -> str | None:
    """Why a point's graph file cannot act on this box (it is recorded unsupported, never timed), or None."""
    path = graph_path(env, run_dir)
    if path is None:
        return None
    name = generated_name(env)
    if name and not path.is_file():
        index = run_dir / GRAPHS_FOLDER / INDEX_FILE
        if not index.is_file():
            return f"{env[GRAPH_VARIABLE]}: no candidates were written for this box (meta.json nccl_graphs says why)"
        return f"{env[GRAPH_VARIABLE]}: not a candidate of this box (its hop bandwidth or path types give others)"
    try:
        text = read_text(path, "NCCL graph file")
        read = read_graph_file(text)
    except (UsageError, GraphFileError) as exc:
        return f"NCCL_GRAPH_FILE={path}: NCCL would refuse it ({exc})"
    if not name:
        box = _box(run_dir)
        if box is not None:
            try:
                check_against_box(read, box)
            except GraphFileError as exc:
                return f"NCCL_GRAPH_FILE={path}: does not fit this box ({exc})"
    return None


def graph_env(env: dict[str, str], run_dir: Path) -> dict[str, str]:
    """The point's variables as the workers get them: a generated candidate's name becomes its file's path."""
    path = graph_path(env, run_dir)
    return env if path is None else {**env, GRAPH_VARIABLE: str(path)}


def dump_env(point_dir: Path, rank: int) -> dict[str, str]:
    """NCCL_TOPO_DUMP_FILE / NCCL_GRAPH_DUMP_FILE for rank 0's untimed probe (NCCL writes them from rank 0,
    init.cc NCCL_TOPO_DUMP_FILE_RANK / NCCL_GRAPH_DUMP_FILE_RANK default 0), kept in the point's folder."""
    if rank != 0:
        return {}
    topo, graphs = DUMP_VARIABLES
    return {topo: str(point_dir / TOPO_DUMP), graphs: str(point_dir / GRAPH_DUMP)}


def loaded_graph(env: dict[str, str], run_dir: Path, init_log: Path) -> dict[str, Any] | None:
    """For a graph point: the file, its sha256 and whether rank 0's INFO log proves NCCL loaded it."""
    path = graph_path(env, run_dir)
    if path is None or not path.is_file():
        return None
    text = read_text(path, "NCCL graph file")
    log = init_log.read_text(errors="replace") if init_log.is_file() else ""
    return check_loaded(log, text, str(path), _bus_ids(run_dir))


def _box(run_dir: Path):
    meta = _meta(run_dir)
    topology = probe_answer(meta.topology) if meta.topology else None
    try:
        return box_from_facts(Facts(origin="run", topology=topology, floor=as_written(meta.floor)))
    except UsageError:
        return None


def _bus_ids(run_dir: Path) -> dict[int, str] | None:
    gpus = _meta(run_dir).probed_gpus
    ids = {g.index: g.pci_bus_id for g in gpus if g.index is not None and g.pci_bus_id}
    return ids or None


def _meta(run_dir: Path) -> RunMeta:
    try:
        return read_meta(run_dir)
    except UsageError:
        return RunMeta()
