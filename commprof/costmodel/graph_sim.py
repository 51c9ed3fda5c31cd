"""A point that runs with NCCL_GRAPH_FILE, simulated: NCCL's model with the file's channels and speed instead of
what its own search would find, and each channel moving data at the box's hop figure shared by the channels.

NCCL picks algorithm and protocol from the file's speedintra x nchannels (tuning.cc reads graph->bwIntra), so the
file's figure is what NCCL believes (`nccl_bw_gbps`); the data moves at the box's hop bandwidth divided among the
channels that share each GPU's link (`channel_bw_gbps`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commprof.costmodel.latency import CostParams
from commprof.costmodel.topology import Topology
from commprof.nccl_graph.box import Box
from commprof.nccl_graph.candidates import GENERATED_PREFIX, build_candidates
from commprof.nccl_graph.graph_file import RING_GRAPH_ID, graph_hash
from commprof.nccl_graph.nccl_reader import GraphFileError, read_graph_file

GRAPH_ERROR_BASIS = (
    "NCCL's uncalibrated model with the graph file's channels and speed and the box's hop figure: no run with "
    "a graph file has been measured against it, so its error is at least the prior's; measure the point"
)


@dataclass(frozen=True)
class GraphModel:
    """What the simulator needs of one graph file, and where each part came from."""

    name: str  # the point's NCCL_GRAPH_FILE value ("generated:ring-4ch-same-hop" or a path)
    channels: int
    speedintra: float  # GB/s per channel, as the file states it
    socket_crossings: int | None  # of one ring; None: unknown
    sha256: str
    hop_gbps: float | None = None  # one hop, one direction; None: the topology's figure
    hop_source: str = ""


def hop_figure(topology: Topology, graph: GraphModel, link: str) -> tuple[float, str]:
    """The hop bandwidth to simulate with: the box's (from the bundle or run the graph was built for), else the
    topology's published pair figure, else NCCL's own link figure; through host memory, NCCL's SHM figure."""
    spec = topology.links.get(link)
    if link == "shm" and spec is not None:
        return spec.channels * spec.channel_bw_gbps, f"topology {topology.name} [links.shm] (NCCL's model)"
    if graph.hop_gbps is not None:
        return graph.hop_gbps, graph.hop_source
    if topology.floor is not None:
        return (
            topology.floor.pair_write_gbps,
            f"topology {topology.name} [floor] pair figure ({topology.floor.evidence})",
        )
    return spec.channels * spec.channel_bw_gbps, f"topology {topology.name} [links.{link}] (NCCL's model)"


def graph_params(params: CostParams, topology: Topology, graph: GraphModel, link: str) -> tuple[CostParams, str]:
    """The point's parameters under the graph file, and the note its records carry."""
    hop, source = hop_figure(topology, graph, link)
    changed = replace(
        params,
        channels=graph.channels,
        channel_bw_gbps=hop / graph.channels,
        nccl_bw_gbps=graph.speedintra,
        bus_cap_gbps=None,
    )
    crossings = f", {graph.socket_crossings} socket crossings per ring" if graph.socket_crossings is not None else ""
    note = (
        f"graph file {graph.name} (sha256 {graph.sha256[:12]}): {graph.channels} channels at {graph.speedintra:g} "
        f"GB/s each as NCCL reads it{crossings}; data moves at {hop:.1f} GB/s per hop shared by the channels "
        f"({source}); hops taken as equal, per-hop latency NCCL's"
    )
    return changed, note


def point_graph(
    env: dict[str, str],
    params: CostParams,
    topology: Topology,
    link: str,
    graphs: dict[str, GraphModel | str] | None,
) -> tuple[CostParams, GraphModel | None, str | None, str | None]:
    """(parameters, the graph, its note, why it cannot be simulated) for a point's NCCL_GRAPH_FILE, if any."""
    value = env.get("NCCL_GRAPH_FILE")
    if value is None:
        return params, None, None, None
    graph = (graphs or {}).get(value)
    if graph is None or isinstance(graph, str):
        return params, None, None, graph or f"graph file {value}: not read for this simulation"
    changed, note = graph_params(params, topology, graph, link)
    return changed, graph, note, None


def generated_models(box: Box) -> dict[str, GraphModel]:
    """Every candidate commprof nccl-graph writes for `box`, keyed as a sweep's points name them."""
    return {
        GENERATED_PREFIX + c.name: GraphModel(
            GENERATED_PREFIX + c.name,
            c.channels,
            c.speedintra,
            c.socket_crossings,
            c.sha256,
            box.hop_gbps,
            f"{box.origin}: {box.bandwidth_source}",
        )
        for c in build_candidates(box)
    }


def file_model(value: str, text: str) -> GraphModel | str:
    """A given graph file's ring graph (id 0), or why it cannot be simulated."""
    try:
        read = read_graph_file(text)
    except GraphFileError as exc:
        return f"graph file {value}: NCCL would refuse it ({exc})"
    ring = next((g for g in read.graphs if g.id == RING_GRAPH_ID), None)
    if ring is None:
        return f"graph file {value}: no ring graph (id 0), NCCL searches its own ring"
    return GraphModel(value, ring.nchannels, ring.speedintra, None, graph_hash(text))
