"""The box as a graph file needs it: each GPU's NVML index and bus id, its socket and PCIe switch, the path level of
every pair and one bandwidth figure per hop, read from the doctor's facts (a bundle, a run's meta.json or live).

Small on purpose: the GPUs, where they hang and how fast a hop is. The simulator's topology preset
(commprof.costmodel.topology) describes NCCL's model of a box class; this describes one box's wiring.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from commprof.doctor.facts import Facts
from commprof.doctor.floor import link_ceiling_gbps
from commprof.doctor.gpus import gpu_view, pair_levels
from commprof.doctor.parse_lspci import bridges_above, parse_lspci
from commprof.errors import UsageError

SAME_SWITCH_LEVELS = ("PIX", "PXB")  # nvidia-smi topo -m: through PCIe bridges only, no host bridge
CROSS_SOCKET_LEVEL = "SYS"


@dataclass(frozen=True)
class BoxGpu:
    """One GPU; `index` is the NVML index, the `dev` NCCL writes in graph files (xml.cc ncclTopoGetXmlFromGpu)."""

    index: int
    bus_id: str
    socket: int | None  # NUMA node; None: unknown
    switch: str | None  # the PCIe switch above it (its upstream port, or a group of PIX/PXB peers); None: none


@dataclass(frozen=True)
class Box:
    """What candidates are built from, and where each part was read."""

    origin: str  # the bundle directory, the run folder or "live"
    gpus: tuple[BoxGpu, ...]
    levels: dict[tuple[int, int], str]  # (a, b) with a < b -> "PIX" | "PXB" | "PHB" | "NODE" | "SYS" | "NV#"
    hop_gbps: float  # one ring hop, one direction (GB/s)
    bandwidth_measured: bool  # True: the floor's measured pair figure; False: derived from the PCIe links
    bandwidth_source: str
    sources: tuple[str, ...]  # where the GPUs, levels, sockets and switches were read

    def level(self, a: int, b: int) -> str | None:
        return self.levels.get((min(a, b), max(a, b)))

    def gpu(self, index: int) -> BoxGpu:
        return next(g for g in self.gpus if g.index == index)

    def crosses_socket(self, a: int, b: int) -> bool:
        sa, sb = self.gpu(a).socket, self.gpu(b).socket
        if sa is not None and sb is not None:
            return sa != sb
        return self.level(a, b) == CROSS_SOCKET_LEVEL

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "gpus": [vars(g) for g in self.gpus],
            "hop_gbps": self.hop_gbps,
            "bandwidth_measured": self.bandwidth_measured,
            "bandwidth_source": self.bandwidth_source,
            "sources": list(self.sources),
        }


def box_from_facts(facts: Facts) -> Box:
    """The box of a bundle, a run or the live machine; UsageError in one line when the facts cannot make one."""
    gpus, where, why = gpu_view(facts)
    if len(gpus) < 2:
        raise UsageError(f"{facts.origin}: {len(gpus)} GPU(s) ({why or where}): a graph file needs 2 GPUs or more")
    levels, levels_where = pair_levels(facts)
    indices = [g["index"] for g in gpus]
    missing = list(itertools.islice(((a, b) for a in indices for b in indices if a < b and (a, b) not in levels), 4))
    if missing:
        raise UsageError(
            f"{facts.origin}: no path level for GPU pair(s) {', '.join(f'{a}-{b}' for a, b in missing[:4])} "
            "(needs nvidia-smi topo -m or the NVML probe)"
        )
    devices = parse_lspci(facts.text("lspci_full") or "")
    by_bus = {d.bdf: d for d in devices}
    sources = [f"GPUs: {where}", f"path levels: {levels_where}"]
    switches = _switches(gpus, devices, by_bus, levels)
    sources.append(
        f"switches: {facts.source('lspci_full').where}"
        if any(g["bus_id"] in by_bus for g in gpus)
        else "switches: PIX/PXB pairs of the path levels"
    )
    sockets = _sockets(gpus, by_bus, levels)
    box_gpus = tuple(BoxGpu(g["index"], g["bus_id"], sockets.get(g["index"]), switches.get(g["index"])) for g in gpus)
    hop, measured, bandwidth_source = _hop_bandwidth(facts, gpus, where)
    return Box(facts.origin, box_gpus, levels, hop, measured, bandwidth_source, tuple(sources))


def _switches(gpus, devices, by_bus, levels) -> dict[int, str | None]:
    """Per GPU, the root-most upstream switch port above it (lspci), else a name for its PIX/PXB group."""
    out: dict[int, str | None] = {}
    for g in gpus:
        device = by_bus.get(g["bus_id"])
        if device is not None:
            ports = [b.bdf for b in bridges_above(device, devices) if b.port_type == "Upstream Port"]
            out[g["index"]] = ports[0] if ports else None
    if len(out) == len(gpus):
        return out
    groups = _components([g["index"] for g in gpus], levels, lambda level: level in SAME_SWITCH_LEVELS)
    return {
        i: (f"switch of GPUs {','.join(map(str, group))}" if len(group) > 1 else None)
        for group in groups
        for i in group
    }


def _sockets(gpus, by_bus, levels) -> dict[int, int | None]:
    """Per GPU, its NUMA node (nvidia-smi / NVML, else lspci), else the group of GPUs it reaches without SYS."""
    out = {}
    for g in gpus:
        node = g.get("numa_node")
        if node is None and g["bus_id"] in by_bus:
            node = by_bus[g["bus_id"]].numa_node
        out[g["index"]] = node
    if all(node is not None for node in out.values()):
        return out
    groups = _components([g["index"] for g in gpus], levels, lambda level: level != CROSS_SOCKET_LEVEL)
    return {i: n for n, group in enumerate(groups) for i in group}


def _components(indices: list[int], levels, joined) -> list[list[int]]:
    """GPUs grouped by the pairs whose level `joined` accepts (connected components), in index order."""
    groups: list[list[int]] = []
    for i in indices:
        linked = [group for group in groups if any(joined(levels.get((min(i, j), max(i, j)), "")) for j in group)]
        merged = sorted({i, *(j for group in linked for j in group)})
        groups = [group for group in groups if group not in linked] + [merged]
    return sorted(groups)


def _hop_bandwidth(facts: Facts, gpus: list[dict], where: str) -> tuple[float, bool, str]:
    """The floor's measured single-pair figure where there is one, else the slowest GPU link's ceiling."""
    figures = (facts.floor or {}).get("figures")
    if isinstance(figures, dict) and isinstance(figures.get("pair_write_gbps"), (int, float)):
        gbps = float(figures["pair_write_gbps"])
        if gbps > 0:
            return (
                gbps,
                figures.get("evidence") == "measured",
                f"floor pair figure {gbps:.1f} GB/s ({figures.get('source')})",
            )
    links = [(g["gen_max"], g["width_max"]) for g in gpus if g.get("gen_max") and g.get("width_max")]
    links = [(gen, width) for gen, width in links if gen in range(1, 7) and width in range(1, 33)]  # PCIe's x1-x32
    if not links:
        raise UsageError(
            f"{facts.origin}: neither a floor (floor.json) nor the GPUs' PCIe generation and width: "
            "no bandwidth to write in the graph (run `commprof floor --out floor.json` on the box)"
        )
    gen, width = min(links, key=lambda link: link_ceiling_gbps(*link))
    gbps = link_ceiling_gbps(gen, width)
    return gbps, False, f"PCIe Gen{gen} x{width} ceiling {gbps:.1f} GB/s per direction ({where}; derived, not measured)"
