"""The all-reduce floor per message size, from four figures of the box. Pure.

One-shot: every GPU reads (or receives) the other n-1 payloads at once, so each GPU's inbound link carries
(n-1) x S; one flag round. Two-shot: reduce-scatter then all-gather, each moving (n-1)/n x S into every GPU,
with a flag round after each. Both pay one kernel launch plus flag exchange (`sync_us`) and one peer write
latency per flag round. The bandwidth is the per-GPU figure with every GPU talking at once, because that is
what an all-reduce does; the single-pair figure is kept for the report (it bounds a ring's hop).
The floor at a size is the cheaper of the two. A kernel at 100 % of the floor moves data as fast as the
links allow and syncs as fast as one launch and one write per round.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

ALGORITHMS = ("one-shot", "two-shot")
EVIDENCE = ("measured", "published")


@dataclass(frozen=True)
class FloorFigures:
    """The figures the floor is computed from, and where they come from."""

    pair_write_gbps: float  # one GPU pair, one direction, nothing else on the fabric (GB/s)
    all_pairs_gbps: float  # per GPU, every GPU writing to every other at once (GB/s)
    write_latency_us: float  # one peer write, issue to visible on the peer
    sync_us: float  # one kernel launch plus the flag exchange a collective needs at least once
    evidence: str  # "measured" (by `commprof floor`) or "published" (figures with sources)
    source: str  # where: the probe run, or the published measurements

    def __post_init__(self):
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
    """The floor of one all-reduce size: its time, the algorithm that reaches it, and both candidates."""

    nbytes: int
    ranks: int
    us: float
    algorithm: str
    one_shot_us: float
    two_shot_us: float


def received_bytes(algorithm: str, nbytes: int, ranks: int) -> float:
    """Bytes each GPU must take in over its links for one all-reduce of `nbytes`."""
    if algorithm == "one-shot":
        return (ranks - 1) * nbytes
    if algorithm == "two-shot":
        return 2 * (ranks - 1) / ranks * nbytes
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")


def flag_rounds(algorithm: str) -> int:
    """Peer flag rounds on the critical path: one-shot one, two-shot one per phase."""
    return 1 if algorithm == "one-shot" else 2


def algorithm_us(algorithm: str, nbytes: int, ranks: int, figures: FloorFigures) -> float:
    """The least time `algorithm` can take for `nbytes` on `ranks` GPUs with these figures (µs)."""
    if ranks < 2:
        return 0.0
    moved = received_bytes(algorithm, nbytes, ranks) / (1000.0 * figures.all_pairs_gbps)  # GB/s = 1000 B/µs
    return figures.sync_us + flag_rounds(algorithm) * figures.write_latency_us + moved


def floor(nbytes: int, ranks: int, figures: FloorFigures) -> Floor:
    """The floor of an all-reduce of `nbytes` per rank: the cheaper of one-shot and two-shot."""
    one = algorithm_us("one-shot", nbytes, ranks, figures)
    two = algorithm_us("two-shot", nbytes, ranks, figures)
    best = "one-shot" if one <= two else "two-shot"
    return Floor(nbytes, ranks, min(one, two), best, one, two)


def all_gather_floor(nbytes: int, ranks: int, figures: FloorFigures) -> Floor:
    """The floor of an all-gather whose output is `nbytes`: each GPU receives the other (n-1)/n of it, one round."""
    if ranks < 2:
        return Floor(nbytes, ranks, 0.0, "all-gather", 0.0, 0.0)
    us = figures.sync_us + figures.write_latency_us + (ranks - 1) / ranks * nbytes / (1000.0 * figures.all_pairs_gbps)
    return Floor(nbytes, ranks, us, "all-gather", us, us)


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
