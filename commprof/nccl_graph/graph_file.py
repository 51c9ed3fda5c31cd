"""NCCL_GRAPH_FILE's format, written as NCCL writes it: `<graphs version><graph ...><channel><gpu dev/>`.

Read from NCCL 2.27.3 (72d2432), 2.28.9 (dbc86fd) and 2.30.7 (73cf112), src/graph/search.cc
ncclTopoGetXmlFromGraphs / ncclTopoGetXmlFromGraph / ncclTopoGetXmlFromChannel (the writer NCCL_GRAPH_DUMP_FILE
uses) and ncclTopoGetGraphFromXmlSub / ncclTopoGetChannelFromXml (the reader), src/graph/xml.cc
ncclTopoGetXmlGraphFromFile, src/graph/xml.h (NCCL_GRAPH_XML_VERSION 1, MAX_STR_LEN 255, MAX_ATTR_COUNT 16).
commprof.nccl_graph.nccl_reader reads files back by the same rules. Pure.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from commprof.terminal import one_line

GRAPH_XML_VERSION = 1  # NCCL_GRAPH_XML_VERSION (xml.h); the loader refuses any other
# struct ncclTopoGraph ids (init.cc): the search NCCL_GRAPH_FILE's <graph id> replaces.
RING_GRAPH_ID, TREE_GRAPH_ID = 0, 1
GRAPH_IDS = {0: "ring", 1: "tree", 2: "collnet_chain", 3: "nvls", 4: "collnet_direct"}
# NCCL_TOPO_PATTERN_* (src/include/graph.h) of the ring graph and of the tree graph init.cc searches.
RING_PATTERN, BALANCED_TREE_PATTERN = 4, 1
# kvDictLinkType (search.cc): typeintra / typeinter values. NCCL matches a prefix and, finding none, falls back to
# LOC silently (xml.h kvConvertToInt), so the reader treats anything else as an error.
PATH_TYPES = ("LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS")
# Without a network NCCL keeps typeInter at its search start, PATH_PIX (search.cc ncclTopoCompute).
NO_NET_TYPE_INTER = "PIX"
# The attributes ncclTopoGetGraphFromXmlSub reads; all but latencyinter are required (xmlGetAttrStr fails).
GRAPH_ATTRIBUTES = (
    "id",
    "pattern",
    "crossnic",
    "nchannels",
    "speedintra",
    "speedinter",
    "latencyinter",
    "typeintra",
    "typeinter",
    "samechannels",
)
OPTIONAL_GRAPH_ATTRIBUTES = ("latencyinter",)


@dataclass(frozen=True)
class Graph:
    """One <graph>: the fields of NCCL's struct ncclTopoGraph a file carries, and its channels."""

    id: int  # which search it replaces: RING_GRAPH_ID, TREE_GRAPH_ID, ...
    pattern: int  # NCCL_TOPO_PATTERN_*
    speedintra: float  # bwIntra: GB/s per channel inside the node, what NCCL's tuning model multiplies by channels
    speedinter: float  # bwInter: GB/s per channel across nodes (NCCL writes bwIntra again on one node)
    typeintra: str  # the farthest path type a channel's hops take (PATH_TYPES)
    typeinter: str
    channels: tuple[tuple[int, ...], ...]  # per channel, the GPUs' NVML indices in ring (or chain) order
    crossnic: int = 0
    latencyinter: float = 0.0
    samechannels: int = 1  # 1 when every channel is the same ring

    def attributes(self) -> dict[str, str]:
        """The attributes in NCCL's order, formatted as NCCL formats them (%d, %g)."""
        values = {
            "id": self.id,
            "pattern": self.pattern,
            "crossnic": self.crossnic,
            "nchannels": len(self.channels),
            "speedintra": self.speedintra,
            "speedinter": self.speedinter,
            "latencyinter": self.latencyinter,
            "typeintra": self.typeintra,
            "typeinter": self.typeinter,
            "samechannels": self.samechannels,
        }
        return {k: (f"{v:g}" if isinstance(v, float) else str(v)) for k, v in values.items()}


def dev_text(index: int) -> str:
    """A GPU's `dev` as NCCL writes it (xmlSetAttrLong, "%#lx") and reads it (strtol base 16): 10 is "0xa"."""
    return f"{index:#x}"


def write_graph_file(graphs: tuple[Graph, ...], comment: str) -> str:
    """The file text: the comment first, then <graphs>. Indented with spaces: NCCL's parser skips only
    spaces and line ends between elements (xml.cc xmlGetNode), a tab is a parse error."""
    # XML comments hold no "--" (a folder named "a-->b" would end one early): each dash before another is spaced.
    lines = [f"<!-- {re.sub('-(?=-)', '- ', one_line(line))} -->" for line in comment.splitlines() if line.strip()]
    lines.append(f'<graphs version="{GRAPH_XML_VERSION}">')
    for graph in graphs:
        attributes = " ".join(f'{k}="{v}"' for k, v in graph.attributes().items())
        lines.append(f"  <graph {attributes}>")
        for channel in graph.channels:
            lines.append("    <channel>")
            lines += [f'      <gpu dev="{dev_text(dev)}"/>' for dev in channel]
            lines.append("    </channel>")
        lines.append("  </graph>")
    lines.append("</graphs>")
    return "\n".join(lines) + "\n"


def graph_hash(text: str) -> str:
    """The sha256 a record carries of the graph file a point ran with."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
