"""Latency models of the all-reduces that are not NCCL (PCIe one-shot / two-shot kernels, fused kinds), per topology.

Two bases, each labelled on every prediction:
- "published": piecewise linear through published (bytes, µs) figures of that kernel on that class of box,
  timed in graph or eager mode as the source says; beyond the last figure, the floor's slope of the kernel's
  algorithm (data movement grows as physics says, not as the last two points happen to).
- "floor": no published figure exists: the floor of the algorithm the point runs (one-shot / two-shot,
  commprof.floor.model) plus a stated overhead. Its expected error is unknown, so no decision rests on it.
A model's expected error (a % and its basis) is what a predicted difference must exceed to count. Pure.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from commprof.errors import UsageError
from commprof.floor.model import ALGORITHMS, FloorFigures, algorithm_us, received_bytes
from commprof.problems import MISSING, Problems
from commprof.records.schema import GRAPH_FIRST
from commprof.records.vocab import KERNEL_BASES, KernelBasis

BASES = KERNEL_BASES
TIMED = GRAPH_FIRST


@dataclass(frozen=True)
class KernelModel:
    """One implementation's predicted all-reduce latency on one topology, and how far to trust it."""

    impl: str
    basis: KernelBasis
    source: str
    points: tuple[tuple[int, float], ...] = ()  # published: (bytes, µs)
    timed: str = "eager"  # what the published figures (or the floor model) are: graph replay or eager launches
    max_bytes: int | None = None  # NCCL above this (the kernel's ceiling), None: any size
    overhead_us: float = 0.0  # floor basis: on top of the floor of the algorithm
    algorithm: str | None = None  # published: the algorithm the figures were taken with (for the slope beyond)
    expected_error_pct: float | None = None  # None: unknown, and then no predicted difference counts
    error_basis: str = ""

    def covers(self, nbytes: int) -> bool:
        return self.max_bytes is None or nbytes <= self.max_bytes

    def graph_us(self, nbytes: int, ranks: int, algorithm: str | None, floor: FloorFigures | None) -> float:
        """The predicted time of one all-reduce under CUDA-graph replay (no CPU launch)."""
        if self.basis == "floor":
            if floor is None:
                raise UsageError(f"{self.impl}: a floor-based model needs the topology's [floor] figures")
            return self.overhead_us + algorithm_us(algorithm or ALGORITHMS[0], nbytes, ranks, floor)
        return self._published_us(nbytes, ranks, floor)

    def _published_us(self, nbytes: int, ranks: int, floor: FloorFigures | None) -> float:
        sizes = [b for b, _ in self.points]
        if nbytes <= sizes[0] or len(self.points) == 1 and floor is None:
            return self.points[0][1] if nbytes <= sizes[0] else self.points[-1][1]
        if nbytes > sizes[-1]:
            last_bytes, last_us = self.points[-1]
            if floor is not None:
                algorithm = self.algorithm or ALGORITHMS[0]
                extra = received_bytes(algorithm, nbytes - last_bytes, ranks)
                return last_us + extra / (1000.0 * floor.all_pairs_gbps)
            (x0, y0), (x1, y1) = self.points[-2], self.points[-1]
            return y1 + (y1 - y0) * (nbytes - x1) / (x1 - x0)
        i = bisect.bisect_left(sizes, nbytes)
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)

    def describe(self) -> dict:
        """What a simulated record says about the model behind its kernel ops."""
        return {
            "impl": self.impl,
            "basis": self.basis,
            "source": self.source,
            "timed": self.timed,
            "max_bytes": self.max_bytes,
            "expected_error_pct": self.expected_error_pct,
            "error_basis": self.error_basis
            or ("unknown: no published figure for this kernel on this box" if self.expected_error_pct is None else ""),
        }

    def to_dict(self) -> dict:
        return {
            **self.describe(),
            "points": [list(p) for p in self.points],
            "overhead_us": self.overhead_us,
            "algorithm": self.algorithm,
        }


MODEL_KEYS = (
    "model",
    "all_reduce_us",
    "timed",
    "algorithm",
    "max_bytes",
    "overhead_us",
    "expected_error_pct",
    "error_basis",
    "source",
)
FLOOR_FIGURES = ("pair_write_gbps", "all_pairs_gbps", "write_latency_us", "sync_us")
LATENCY_POINTS = "a list of [bytes, microseconds] pairs, both > 0"


def kernel_model_from_table(impl: str, table: dict, problems: Problems) -> KernelModel | None:
    """[impls.<name>] of a topology file; None after recording every problem in it."""
    key = f"impls.{impl}"
    before = len(problems.errors)
    problems.unknown_keys(table, MODEL_KEYS, key)
    stated_basis = table.get("model", "published" if "all_reduce_us" in table else MISSING)
    basis = problems.choice(stated_basis, f"{key}.model", BASES, "a model basis")
    points = (
        _points(table.get("all_reduce_us", MISSING), f"{key}.all_reduce_us", problems) if basis == "published" else ()
    )
    source = problems.string(table.get("source", MISSING), f"{key}.source")
    timed = problems.choice(table.get("timed", "eager"), f"{key}.timed", TIMED, "a timing mode")
    algorithm = table.get("algorithm")
    if algorithm is not None:
        algorithm = problems.choice(algorithm, f"{key}.algorithm", ALGORITHMS, "an all-reduce algorithm")
    max_bytes = problems.integer(table["max_bytes"], f"{key}.max_bytes", 1) if "max_bytes" in table else None
    overhead = problems.number(table.get("overhead_us", 0.0), f"{key}.overhead_us", 0.0)
    error = table.get("expected_error_pct")
    error_basis = table.get("error_basis", "")
    if error is not None:
        error = problems.number(error, f"{key}.expected_error_pct", 0.0)
        error_basis = problems.string(table.get("error_basis", MISSING), f"{key}.error_basis")
    if len(problems.errors) > before:
        return None
    return KernelModel(
        impl=impl,
        basis=basis,
        source=source,
        points=points,
        timed=timed,
        max_bytes=max_bytes,
        overhead_us=overhead,
        algorithm=algorithm,
        expected_error_pct=error,
        error_basis=error_basis,
    )


def _points(raw, key: str, problems: Problems) -> tuple[tuple[int, float], ...] | None:
    if raw is MISSING:
        problems.error(key, f"missing (allowed: {LATENCY_POINTS})")
        return None
    try:
        points = tuple(sorted((int(b), float(us)) for b, us in raw))
    except (TypeError, ValueError):
        points = ()
    if not points or any(b <= 0 or us <= 0 for b, us in points):
        problems.error(key, f"{raw!r} is not {LATENCY_POINTS} (allowed: {LATENCY_POINTS})")
        return None
    return points


def floor_from_table(raw, problems: Problems) -> FloorFigures | None:
    """[floor] of a topology file: published figures with their sources; None after recording every problem."""
    table = problems.table(raw, "floor")
    problems.unknown_keys(table, (*FLOOR_FIGURES, "sources"), "floor")
    values = {name: problems.number(table.get(name, MISSING), f"floor.{name}", 0.0) for name in FLOOR_FIGURES}
    sources = problems.strings(table.get("sources", MISSING), "floor.sources")
    if sources is not None and not any(sources):
        problems.error("floor.sources", "empty (allowed: a list saying where each figure comes from)")
        sources = None
    if sources is None or any(value is None for value in values.values()):
        return None
    try:
        return FloorFigures(**values, evidence="published", source="; ".join(sources))
    except ValueError as exc:
        problems.error("floor", str(exc))
        return None
