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
from typing import Annotated, Any

import msgspec

from commprof.errors import UsageError
from commprof.floor.model import ALGORITHMS, FloorFigures, algorithm_us, received_bytes
from commprof.problems import Problems, String, choice, integer, number, table
from commprof.records.schema import GRAPH_FIRST
from commprof.records.validate import bounded
from commprof.records.values import LARGEST, MAX_BYTES
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


FLOOR_FIGURES = ("pair_write_gbps", "all_pairs_gbps", "write_latency_us", "sync_us")
LATENCY_POINTS = "a list of [bytes, microseconds] pairs, both > 0"


class KernelTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """[impls.<name>] of a topology file: a kernel's latency model (KernelModel) as the file states it."""

    model: choice(BASES, "a model basis") | None = None  # None: "published" where all_reduce_us is given
    all_reduce_us: Any = None  # published: LATENCY_POINTS (read by _points)
    source: String  # where the figures (or the floor's overhead) come from
    timed: choice(TIMED, "a timing mode") = "eager"
    algorithm: choice(ALGORITHMS, "an all-reduce algorithm") | None = None
    max_bytes: integer(1, most=MAX_BYTES) | None = None
    overhead_us: number(0.0) = 0.0
    expected_error_pct: number(0.0) | None = None  # given: error_basis must say why
    error_basis: String | None = None


class FloorTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """[floor] of a topology file: the box's published floor figures (FloorFigures) and where each comes from."""

    pair_write_gbps: number(0.0)
    all_pairs_gbps: number(0.0)
    write_latency_us: number(0.0)
    sync_us: number(0.0)
    sources: Annotated[list[String], msgspec.Meta(extra={"want": "a list of strings"})]


def kernel_model_from_table(impl: str, raw: dict, problems: Problems) -> KernelModel | None:
    """[impls.<name>] of a topology file; None after recording every problem in it."""
    key = f"impls.{impl}"
    before = len(problems.errors)
    model = problems.read(raw, KernelTable, ("impls", impl))
    basis = model.model or ("published" if "all_reduce_us" in raw else None)
    if basis is None and "model" not in raw:
        problems.error(f"{key}.model", f"missing (allowed: {', '.join(BASES)})")
    points = _points(model.all_reduce_us, f"{key}.all_reduce_us", problems) if basis == "published" else ()
    if model.expected_error_pct is not None and model.error_basis is None and "error_basis" not in raw:
        problems.error(f"{key}.error_basis", "missing (allowed: a string)")
    if len(problems.errors) > before:
        return None
    return KernelModel(
        impl=impl,
        basis=basis,
        source=model.source,
        points=points,
        timed=model.timed,
        max_bytes=model.max_bytes,
        overhead_us=model.overhead_us,
        algorithm=model.algorithm,
        expected_error_pct=model.expected_error_pct,
        error_basis=model.error_basis or "",
    )


# LATENCY_POINTS as a type: integer bytes a record may hold, finite microseconds above 0
_LATENCY_POINTS = list[tuple[bounded(int, gt=0, le=MAX_BYTES), bounded(float, gt=0, le=LARGEST)]]


def _points(raw, key: str, problems: Problems) -> tuple[tuple[int, float], ...] | None:
    if raw is None:
        problems.error(key, f"missing (allowed: {LATENCY_POINTS})")
        return None
    try:
        points = tuple(sorted(msgspec.convert(raw, _LATENCY_POINTS)))
    except msgspec.ValidationError:
        points = ()
    if len({b for b, _ in points}) < len(points):
        problems.error(key, f"{raw!r} gives a size twice, which has no one latency (allowed: {LATENCY_POINTS})")
        return None
    if not points:
        problems.error(key, f"{raw!r} is not {LATENCY_POINTS} (allowed: {LATENCY_POINTS})")
        return None
    return points


def floor_from_table(raw, problems: Problems) -> FloorFigures | None:
    """[floor] of a topology file: published figures with their sources; None after recording every problem."""
    before = len(problems.errors)
    figures = problems.read(raw, table(FloorTable), ("floor",))
    if figures is not None and figures.sources is not None and not any(figures.sources):
        problems.error("floor.sources", "empty (allowed: a list saying where each figure comes from)")
    if len(problems.errors) > before:
        return None
    try:
        values = {name: getattr(figures, name) for name in FLOOR_FIGURES}
        return FloorFigures(**values, evidence="published", source="; ".join(figures.sources))
    except ValueError as exc:
        problems.error("floor", str(exc))
        return None
