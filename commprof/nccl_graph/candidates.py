"""Graph-file candidates for one box: rings that keep switch neighbours together and cross each socket boundary as
few times as the sockets allow, a tree chain in the same order, channel counts from 2 up to what the hop bandwidth
carries, and each file checked as NCCL will read it before anyone writes it. Pure.

NCCL's own search on dual AMD sockets prices the inter-socket hop at AMD_BW = 16 GB/s (src/graph/topo.h) and
settles for a poor graph; a candidate states the box's figure instead, and says where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.nccl_graph.box import Box
from commprof.nccl_graph.graph_file import (
    BALANCED_TREE_PATTERN,
    NO_NET_TYPE_INTER,
    PATH_TYPES,
    RING_GRAPH_ID,
    RING_PATTERN,
    TREE_GRAPH_ID,
    Graph,
    graph_hash,
    write_graph_file,
)
from commprof.nccl_graph.nccl_reader import GraphFileError, ReadFile, read_graph_file

MIN_CHANNELS = 2
# NCCL's own ring search tries up to MAXCHANNELS / 2 = 32 rings (init.cc, MAXCHANNELS 64 in 2.28); commprof stops
# at 16: each ring then gets a sixteenth of a GPU's link, and every channel is a CTA the model's kernels lose.
MAX_CHANNELS = 16
# The slowest per-channel speed in every NCCL search array (search.cc speedArrayIntra, sm90 / sm100 arrays end
# at or above it): a channel count that leaves less per channel is one NCCL's own search would never pick.
MIN_CHANNEL_GBPS = 3.0
VARIANTS = ("same", "mirrored")  # every channel the same ring; or every other channel the ring backwards
# typeintra: the farthest hop's own path type, or PHB stated where that is SYS (see type_choices).
TYPE_KINDS = ("hop", "phb")
GENERATED_PREFIX = "generated:"  # how a sweep names one candidate of the box it runs on


def candidate_name(channels: int, variant: str, type_kind: str) -> str:
    return f"ring-{channels}ch-{variant}-{type_kind}"


def possible_names() -> tuple[str, ...]:
    """Every name a candidate can have on any box (a box's own are a subset: build_candidates)."""
    counts, n = [], MIN_CHANNELS
    while n <= MAX_CHANNELS:
        counts.append(n)
        n *= 2
    return tuple(candidate_name(n, v, t) for n in counts for v in VARIANTS for t in TYPE_KINDS)


# nvidia-smi topo -m levels, nearest first, as NCCL's path types name them (NV# is NVLink).
_PATH_OF_LEVEL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


@dataclass(frozen=True)
class Candidate:
    """One graph file: what it holds, how it was built, its text and hash."""

    name: str  # the file's stem, e.g. "ring-4ch-same-hop"
    channels: int
    variant: str
    ring: tuple[int, ...]  # the ring of channel 0, NVML indices
    socket_crossings: int  # hops of one ring that cross a socket boundary
    switch_crossings: int  # hops that leave a PCIe switch
    speedintra: float
    typeintra: str
    built_from: str  # one line: the box, its sources, the bandwidth
    text: str
    sha256: str

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "text"} | {"ring": list(self.ring)}


def ring_order(box: Box) -> tuple[int, ...]:
    """GPUs socket by socket, switch by switch inside a socket, index order inside a switch: every switch's GPUs
    are neighbours and the ring leaves each socket once (2 crossings on 2 sockets, the fewest a ring can have)."""

    def key(gpu):
        socket = gpu.socket if gpu.socket is not None else 1 << 30
        first_on_switch = min(g.index for g in box.gpus if g.switch == gpu.switch) if gpu.switch else gpu.index
        return socket, first_on_switch, gpu.index

    return tuple(g.index for g in sorted(box.gpus, key=key))


def hops(ring: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]


def socket_crossings(box: Box, ring: tuple[int, ...]) -> int:
    return sum(box.crosses_socket(a, b) for a, b in hops(ring))


def switch_crossings(box: Box, ring: tuple[int, ...]) -> int:
    return sum(box.gpu(a).switch is None or box.gpu(a).switch != box.gpu(b).switch for a, b in hops(ring))


def path_type(box: Box, ring: tuple[int, ...], closed: bool = True) -> str:
    """The farthest path type the ring's (or chain's) hops take, as NCCL's typeintra names it."""
    pairs = hops(ring) if closed else list(zip(ring, ring[1:]))
    types = [_PATH_OF_LEVEL.get(box.level(a, b) or "SYS", "NVL") for a, b in pairs]
    return max(types, key=PATH_TYPES.index)


def channel_counts(box: Box) -> tuple[int, ...]:
    """2, 4, 8, ... while each channel keeps at least NCCL's slowest search speed of the hop's bandwidth."""
    counts, n = [], MIN_CHANNELS
    while n <= MAX_CHANNELS and box.hop_gbps / n >= MIN_CHANNEL_GBPS:
        counts.append(n)
        n *= 2
    return tuple(counts)


def type_choices(box: Box, ring: tuple[int, ...]) -> dict[str, str]:
    """The typeintra values to try: the farthest hop's path type, and PHB where that is SYS (the type of the
    hand-written file that fixed dual-Turin boxes, rtx6kpro optimization/nccl-tuning.md; NCCL 2.28 tuning.cc reads
    typeIntra only to allow LL128 and NVLink latencies, so the sweep, not this module, decides)."""
    found = path_type(box, ring)
    return {"hop": found, "phb": "PHB"} if found == "SYS" else {"hop": found}


def build_candidates(box: Box) -> list[Candidate]:
    """Every candidate for the box, each checked against it as NCCL reads it (GraphFileError if one fails)."""
    ring = ring_order(box)
    out = []
    for n in channel_counts(box):
        for variant in VARIANTS:
            channels = tuple(ring if variant == "same" or c % 2 == 0 else ring[::-1] for c in range(n))
            speed = int(box.hop_gbps / n * 10) / 10  # per channel, rounded down to 0.1 GB/s
            same = int(variant == "same")
            for type_kind, type_intra in type_choices(box, ring).items():
                tree_type = type_intra if type_intra != path_type(box, ring) else path_type(box, ring, closed=False)
                graphs = (
                    Graph(
                        RING_GRAPH_ID,
                        RING_PATTERN,
                        speed,
                        speed,
                        type_intra,
                        NO_NET_TYPE_INTER,
                        channels,
                        samechannels=same,
                    ),
                    Graph(
                        TREE_GRAPH_ID,
                        BALANCED_TREE_PATTERN,
                        speed,
                        speed,
                        tree_type,
                        NO_NET_TYPE_INTER,
                        channels,
                        samechannels=same,
                    ),
                )
                name = candidate_name(n, variant, type_kind)
                built_from = _built_from(box, ring, n, variant, speed, type_intra)
                text = write_graph_file(graphs, built_from)
                check_against_box(read_graph_file(text), box)
                out.append(
                    Candidate(
                        name,
                        n,
                        variant,
                        ring,
                        socket_crossings(box, ring),
                        switch_crossings(box, ring),
                        speed,
                        type_intra,
                        built_from.splitlines()[0],
                        text,
                        graph_hash(text),
                    )
                )
    return out


def _built_from(box: Box, ring: tuple[int, ...], n: int, variant: str, speed: float, type_intra: str) -> str:
    order = " ".join(map(str, ring))
    how = (
        "every channel this ring" if variant == "same" else "odd channels run it backwards (the links' other direction)"
    )
    return "\n".join(
        [
            f"commprof nccl-graph: ring and tree of {len(ring)} GPUs, {n} channels, {how}, typeintra {type_intra}",
            f"ring (NVML indices, dev below): {order}; crosses sockets {socket_crossings(box, ring)} times, "
            f"leaves a switch {switch_crossings(box, ring)} times",
            f"built from {box.origin}: " + "; ".join(box.sources),
            f"speedintra {speed:g} GB/s per channel = {box.hop_gbps:.1f} GB/s / {n} channels: {box.bandwidth_source}",
            "applies to every communicator over exactly these GPUs; any other group (TP sub-groups, fewer GPUs) "
            "fails to load it; re-measure after an NCCL upgrade",
        ]
    )


def check_against_box(read: ReadFile, box: Box) -> None:
    """What NCCL needs of a file on this box: every channel of the ring and tree graphs visits each of the box's GPUs
    once (a dev NCCL cannot find fails the init: "XML Import Channel : dev %ld not found"), nchannels equals
    the channels given, nothing NCCL would ignore. GraphFileError names the first problem."""
    if read.ignored:
        raise GraphFileError(f"NCCL ignores element(s) {', '.join(sorted(set(read.ignored)))}")
    wanted = sorted(g.index for g in box.gpus)
    for graph in read.graphs:
        if graph.nchannels != len(graph.channels) or not graph.channels:
            raise GraphFileError(
                f"graph {graph.id}: nchannels={graph.nchannels} but {len(graph.channels)} <channel> elements"
            )
        if graph.id not in (RING_GRAPH_ID, TREE_GRAPH_ID):
            continue
        for c, channel in enumerate(graph.channels):
            if sorted(channel.gpus) != wanted:
                raise GraphFileError(
                    f"graph {graph.id} channel {c}: GPUs {list(channel.gpus)}, not each of the box's {wanted} once"
                )
