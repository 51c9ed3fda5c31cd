"""From the floor probe's raw measurements to the box's floor figures and a per-size table. Pure.

The probe (commprof/floor/probe.py) times peer copies per ordered GPU pair by copy engine and by SM kernel, all
pairs at once, a tiny peer write, and one launch under CUDA-graph replay; this module turns them into
FloorFigures (the best pair copy, the slowest GPU's inbound bandwidth with every GPU sending, the median write
latency, launch plus one write round trip as the sync cost) and the floor at each size, with the figures' origin.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from commprof.floor.model import FloorFigures, floor

DEFAULT_SIZES = tuple(1 << k for k in range(10, 21))  # 1 KiB .. 1 MiB


@dataclass(frozen=True)
class PairCopy:
    """One ordered pair's copy bandwidth (GB/s) by copy engine and by SM kernel (None: that way was not measured)."""

    src: int
    dst: int
    ce_gbps: float | None
    sm_gbps: float | None
    write_latency_us: float | None


@dataclass(frozen=True)
class FloorProbe:
    """Everything the probe measured, and what it could not (with why)."""

    gpus: list[str]
    pairs: list[PairCopy]
    all_pairs_ingress_gbps: dict[int, float]  # GPU -> inbound GB/s with every GPU sending to every other at once
    launch_us: float | None  # one tiny kernel under CUDA-graph replay
    copy_bytes: int
    not_measured: list[str] = field(default_factory=list)
    host: str = ""
    time: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def figures(probe: FloorProbe) -> FloorFigures:
    """The floor figures a probe supports; ValueError naming what is missing."""
    pair_best = [max(v for v in (p.ce_gbps, p.sm_gbps) if v) for p in probe.pairs if p.ce_gbps or p.sm_gbps]
    latencies = [p.write_latency_us for p in probe.pairs if p.write_latency_us is not None]
    if not pair_best or not probe.all_pairs_ingress_gbps or not latencies or probe.launch_us is None:
        raise ValueError("the probe measured too little for a floor: " + "; ".join(probe.not_measured or ["no pairs"]))
    latency = statistics.median(latencies)
    return FloorFigures(
        pair_write_gbps=max(pair_best),
        all_pairs_gbps=min(probe.all_pairs_ingress_gbps.values()),
        write_latency_us=latency,
        sync_us=probe.launch_us + 2 * latency,  # a launch, then a flag written to a peer and its answer read back
        evidence="measured",
        source=f"commprof floor on {probe.host or 'this host'} at {probe.time or 'an unrecorded time'} "
        f"({len(probe.gpus)} GPUs: {', '.join(sorted(set(probe.gpus)))})",
    )


def floor_table(figs: FloorFigures, ranks: int, sizes=DEFAULT_SIZES) -> list[dict]:
    """The floor at each size: one-shot, two-shot, ring, and the cheapest."""
    rows = []
    for nbytes in sizes:
        f = floor(nbytes, ranks, figs)
        rows.append(
            {
                "bytes": nbytes,
                "floor_us": f.us,
                "algorithm": f.algorithm,
                "one_shot_us": f.one_shot_us,
                "two_shot_us": f.two_shot_us,
                "ring_us": f.ring_us,
            }
        )
    return rows
