"""Did NCCL load the graph file? Read from its INFO log (NCCL_DEBUG_SUBSYS with ENV and GRAPH), not assumed.

NCCL 2.27-2.30 src/graph/search.cc ncclTopoCompute prints "NCCL_GRAPH_FILE set by environment to %s" and, per
graph the file replaces, "Search %d : %d channels loaded from XML graph"; ncclTopoPrintGraph then prints
"Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d" and one " %2d : GPU/%lx-%lx ..."
line per channel, each GPU by its topology id (its PCI bus id as an integer, src/misc/utils.cc busIdToInt64).
A file NCCL refuses leaves a WARN ("XML Import Channel : dev %ld not found", "XML Graph has wrong version",
"Attribute %s of node %s not found") and fails the init. Pure.
"""

from __future__ import annotations

import re
from typing import Any

from commprof.nccl_graph.graph_file import RING_GRAPH_ID, graph_hash
from commprof.nccl_graph.nccl_reader import GraphFileError, read_graph_file

_SET = re.compile(r"NCCL INFO NCCL_GRAPH_FILE set by environment to (.*?)\s*$")
_LOADED = re.compile(r"NCCL INFO Search (\d+) : (\d+) channels loaded from XML graph")
_PATTERN = re.compile(
    r"NCCL INFO Pattern (\d+), crossNic \d+, nChannels (\d+), bw ([\d.]+)/[\d.]+, type (\w+)/\w+, sameChannels"
)
_CHANNEL = re.compile(r"NCCL INFO\s+(\d+) :((?: (?:GPU|NET)/[0-9a-f]+-[0-9a-f]+)+)\s*$")
_PROCESS = re.compile(r"^\s*(?:\S*?)([^\s:\[\]()]+:\d+):\d+ \[\d+\] ")  # host:pid of "host:pid:tid [dev] NCCL ..."
_WARN = re.compile(r"NCCL WARN (.*(?:XML|Attribute .* not found|graph file).*)$", re.I)


def nccl_gpu_id(bus_id: str) -> int:
    """A GPU's topology id as NCCL prints it: the bus id's hex digits as one number ("0000:06:00.0" -> 0x6000)."""
    digits = "".join(c for c in bus_id if c not in ":.")
    return int(digits[:16], 16)


def check_loaded(log: str, graph_text: str, path: str, bus_ids: dict[int, str] | None = None) -> dict[str, Any]:
    """{"path", "sha256", "loaded": True | False | None, "why", "evidence"}: None when the log cannot tell.

    `bus_ids`: NVML index -> bus id, to compare the ring NCCL printed with the file's order.
    """
    out: dict[str, Any] = {"path": path, "sha256": graph_hash(graph_text), "loaded": None, "why": "", "evidence": []}
    try:
        read = read_graph_file(graph_text)
    except GraphFileError as exc:
        return out | {"loaded": False, "why": f"NCCL would refuse the file: {exc}"}
    lines = _one_process(log.splitlines())
    warns = [m.group(1) for line in lines if (m := _WARN.search(line))]
    if warns:
        return out | {"loaded": False, "why": f"NCCL refused it: {warns[0]}", "evidence": warns[:3]}
    told = [m.group(1) for line in lines if (m := _SET.search(line))]
    if not told:
        why = "the log has no 'NCCL_GRAPH_FILE set by environment' line (NCCL_DEBUG=INFO with ENV was not on)"
        return out | {"why": why}
    if told[0] != path:
        return out | {"loaded": False, "why": f"NCCL read NCCL_GRAPH_FILE={told[0]}, not {path}"}
    wanted = {g.id: len(g.channels) for g in read.graphs}
    loaded: dict[int, int] = {}
    for line in lines:
        if m := _LOADED.search(line):
            loaded.setdefault(int(m.group(1)), int(m.group(2)))
    evidence = [f"NCCL_GRAPH_FILE set by environment to {told[0]}"]
    evidence += [f"Search {i} : {n} channels loaded from XML graph" for i, n in sorted(loaded.items())]
    for graph_id, channels in wanted.items():
        if graph_id not in (RING_GRAPH_ID, 1):
            continue
        if loaded.get(graph_id) != channels:
            found = loaded.get(graph_id)
            why = f"graph {graph_id}: the file has {channels} channels, NCCL loaded {found if found is not None else 'none'}"
            return out | {"loaded": False, "why": why, "evidence": evidence}
    ring = next((g for g in read.graphs if g.id == RING_GRAPH_ID), None)
    if ring is not None:
        problem = _printed_ring(lines, ring, bus_ids)
        if problem:
            return out | {"loaded": False, "why": problem, "evidence": evidence}
        evidence.append(
            f"ring graph printed as the file states it ({ring.nchannels} channels, {ring.speedintra:g} GB/s)"
        )
    return out | {"loaded": True, "why": "NCCL loaded every graph the file holds", "evidence": evidence}


def _one_process(lines: list[str]) -> list[str]:
    """The lines of the first process that says it read NCCL_GRAPH_FILE: ranks logging into one file interleave."""
    first = next((line for line in lines if _SET.search(line)), None)
    m = _PROCESS.match(first) if first else None
    if m is None:
        return lines
    return [line for line in lines if (p := _PROCESS.match(line)) is None or p.group(1) == m.group(1)]


def _printed_ring(lines: list[str], ring, bus_ids: dict[int, str] | None) -> str | None:
    """Why the first ring graph NCCL printed after loading differs from the file, or None."""
    for i, line in enumerate(lines):
        m = _PATTERN.search(line)
        if not m or int(m.group(1)) != ring.pattern:
            continue
        channels, bw, type_intra = int(m.group(2)), float(m.group(3)), m.group(4)
        if channels != ring.nchannels or abs(bw - ring.speedintra) > 0.01 or type_intra != ring.typeintra:
            return (
                f"NCCL's ring graph is {channels} channels at {bw:g} GB/s type {type_intra}; the file states "
                f"{ring.nchannels} at {ring.speedintra:g} type {ring.typeintra}"
            )
        if bus_ids is None:
            return None
        order = []
        for follow in lines[i + 1 : i + 1 + channels]:
            c = _CHANNEL.search(follow)
            if c is None:
                break
            ids = [int(tok.split("-")[1], 16) for tok in c.group(2).split() if tok.startswith("GPU/")]
            order.append(ids)
        for c, (printed, given) in enumerate(zip(order, ring.channels)):
            expected = [nccl_gpu_id(bus_ids[d]) for d in given.gpus if d in bus_ids]
            if printed != expected:
                return f"channel {c}: NCCL's ring {[hex(x) for x in printed]} is not the file's {[hex(x) for x in expected]}"
        return None
    return "no ring graph line (Pattern 4 ...) in the log after loading"
