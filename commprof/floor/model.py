"""The all-reduce (and all-gather) floor per message size, from four figures of the box. Pure.

One-shot: every GPU reads (or receives) the other n-1 payloads at once, so each GPU's inbound link carries
(n-1) x S; one flag round. Two-shot: reduce-scatter then all-gather, each moving (n-1)/n x S into every GPU,
with a flag round after each. Both are all-to-all traffic, so they move data at the per-GPU figure with every
GPU talking to every other at once. Ring: the same bytes as two-shot, but each GPU only receives from one
neighbour, so it can move data at the single-pair figure, paying one peer write latency per hop (2(n-1) for an
all-reduce, n-1 for an all-gather). Neighbour traffic really is faster than all-to-all on PCIe: NCCL's ring
all-reduce on 8 x RTX PRO 6000 behind switches reaches 39-41 GB/s bus bandwidth where all-to-all copies get
21-24 GB/s per GPU (rtx6kpro hardware/pcie-bandwidth.md), so a floor without the ring is no floor for
large messages. Every algorithm pays one kernel launch plus flag exchange (`sync_us`).
The floor at a size is the cheapest algorithm. A kernel at 100 % of the floor moves data as fast as the
links allow and syncs as fast as one launch and one write per round.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from commprof.records.vocab import FLOOR_EVIDENCE, FloorEvidence

ALGORITHMS = ("one-shot", "two-shot")  # the PCIe kernels' algorithms (impls and kernel models name these)
RING = "ring"  # neighbour traffic: what NCCL's ring does; part of the floor, not a kernel option
FLOOR_ALGORITHMS = (*ALGORITHMS, RING)
EVIDENCE = FLOOR_EVIDENCE


# Beyond these no peer link measures (GB/s: well above NVLink 5's 900) and no launch waits (µs).
FIGURE_LIMITS = {"pair_write_gbps": 10_000, "all_pairs_gbps": 10_000, "write_latency_us": 1e6, "sync_us": 1e6}


@dataclass(frozen=True)
class FloorFigures:
    """The figures the floor is computed from, and where they come from."""

    pair_write_gbps: float  # one GPU pair, one direction, nothing else on the fabric (GB/s)
    all_pairs_gbps: float  # per GPU, every GPU writing to every other at once (GB/s)
    write_latency_us: float  # one peer write, issue to visible on the peer
    sync_us: float  # one kernel launch plus the flag exchange a collective needs at least once
    evidence: FloorEvidence  # "measured" (by `commprof floor`) or "published" (figures with sources)
    source: str  # where: the probe run, or the published measurements

    def __post_init__(self):
        for name, most in FIGURE_LIMITS.items():  # a floor file is user input: NaN, "x" or 1e30 is no figure
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"floor {name} must be a finite number, got {value!r}")
            if value > most:
                raise ValueError(f"floor {name} must be at most {most:g}, got {value!r}")
        if not isinstance(self.source, str):
            raise ValueError(f"floor source must be a string, got {self.source!r}")
        if self.evidence not in EVIDENCE:
            raise ValueError(f"floor evidence must be one of {', '.join(EVIDENCE)}, not {self.evidence!r}")
        for name in ("pair_write_gbps", "all_pairs_gbps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"floor {name} must be > 0, got {getattr(self, name)!r}")
        for name in ("write_latency_us", "sync_us"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"floor {name} must be >= 0, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Floor:
    """The floor of one collective at one size: its time, the algorithm that reaches it, and every candidate's."""

    nbytes: int
    ranks: int
    us: float
    algorithm: str
    one_shot_us: float
    two_shot_us: float
    ring_us: float


def received_bytes(algorithm: str, nbytes: int, ranks: int) -> float:
    """Bytes each GPU must take in over its links for one all-reduce of `nbytes`."""
    if algorithm == "one-shot":
        return (ranks - 1) * nbytes
    if algorithm in ("two-shot", RING):
        return 2 * (ranks - 1) / ranks * nbytes
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r} (known: {', '.join(FLOOR_ALGORITHMS)})")


def flag_rounds(algorithm: str, ranks: int) -> int:
    """Peer writes in sequence on the critical path: one-shot one, two-shot one per phase, ring one per hop."""
    return {"one-shot": 1, "two-shot": 2}.get(algorithm, 2 * (ranks - 1))


def link_gbps(algorithm: str, figures: FloorFigures) -> float:
    """The per-GPU inbound bandwidth the algorithm's traffic can reach: all-to-all, or one neighbour (ring)."""
    return figures.pair_write_gbps if algorithm == RING else figures.all_pairs_gbps


def algorithm_us(algorithm: str, nbytes: int, ranks: int, figures: FloorFigures) -> float:
    """The least time `algorithm` can take for `nbytes` on `ranks` GPUs with these figures (µs)."""
    if ranks < 2:
        return 0.0
    moved = received_bytes(algorithm, nbytes, ranks) / (1000.0 * link_gbps(algorithm, figures))  # GB/s = 1000 B/µs
    return figures.sync_us + flag_rounds(algorithm, ranks) * figures.write_latency_us + moved


def floor(nbytes: int, ranks: int, figures: FloorFigures) -> Floor:
    """The floor of an all-reduce of `nbytes` per rank: the cheapest of one-shot, two-shot and ring."""
    times = {a: algorithm_us(a, nbytes, ranks, figures) for a in FLOOR_ALGORITHMS}
    best = min(times, key=times.__getitem__)
    return Floor(nbytes, ranks, times[best], best, times["one-shot"], times["two-shot"], times[RING])


def all_gather_floor(nbytes: int, ranks: int, figures: FloorFigures) -> Floor:
    """The floor of an all-gather whose output is `nbytes`: each GPU receives the other (n-1)/n of it, either
    from every peer at once in one round (one-shot) or from its ring neighbour in n-1 hops."""
    if ranks < 2:
        return Floor(nbytes, ranks, 0.0, "one-shot", 0.0, 0.0, 0.0)
    received = (ranks - 1) / ranks * nbytes
    one = figures.sync_us + figures.write_latency_us + received / (1000.0 * figures.all_pairs_gbps)
    ring = figures.sync_us + (ranks - 1) * figures.write_latency_us + received / (1000.0 * figures.pair_write_gbps)
    # An all-gather has no reduce phase: one-shot is its only all-to-all form (two-shot = one-shot here).
    return Floor(nbytes, ranks, min(one, ring), "one-shot" if one <= ring else RING, one, one, ring)


def collective_floor(collective: str, nbytes: int, ranks: int, figures: FloorFigures) -> Floor:
    """The floor of a plan collective ("all_reduce", its fused kind, or "all_gather") at its op bytes."""
    return all_gather_floor(nbytes, ranks, figures) if collective == "all_gather" else floor(nbytes, ranks, figures)


def pct_of_floor(time_us: float, floor_us: float) -> float | None:
    """A time as % of the floor (100 = at the floor; 250 = 2.5x the floor); None without a positive floor."""
    if not floor_us or floor_us <= 0 or time_us is None:
        return None
    return 100.0 * time_us / floor_us


def crossover_bytes(ranks: int, figures: FloorFigures) -> float:
    """The size above which two-shot's floor is lower than one-shot's (bytes; inf for 2 ranks)."""
    # one = sync + L + (n-1)S/B ; two = sync + 2L + 2(n-1)/n S/B  ->  S* = L B n / ((n-1)(n-2))
    if ranks <= 2:
        return float("inf")
    return figures.write_latency_us * 1000.0 * figures.all_pairs_gbps * ranks / ((ranks - 1) * (ranks - 2))
