"""What runs between a replayed step's collectives: the engine's compute in each gap, and ranks that arrive late.

An engine never issues its collectives back to back: ~40 µs of compute sits between two all-reduces of a decode
step, and MoE routing makes some ranks late. `[run] compute` and `[run] skew` (docs/sweep-files.md) say what to
put there; this module parses them once and resolves them against a step plan into per-op microseconds, which
the harness (commprof/replay/spacers.py) runs before each op. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from commprof.errors import UsageError
from commprof.planner.plan import StepPlan
from commprof.textfiles import CONFIG_BYTES, read_json

ComputeKind = Literal["none", "uniform", "trace", "gemm"]
COMPUTE_KINDS: tuple[ComputeKind, ...] = ("none", "uniform", "trace", "gemm")
COMPUTE_FORMS = '"none", "uniform:<µs>", "trace:<commprof trace --json file>" or "gemm"'
SKEW_FORMS = '{ rank = <r>, us = <µs> } or "trace:<commprof trace --json file>"'


def _trace_json(path: str, what: str) -> dict[str, Any]:
    """A `commprof trace --json` output, read for its step's gaps or lags (a regular file of bounded size)."""
    data = read_json(path, f"{what} trace file", CONFIG_BYTES)
    if not isinstance(data, dict):
        raise UsageError(f"{what} trace:{path}: not a `commprof trace --json` file (expected an object)")
    return data


def _numbers(values: Any, what: str) -> tuple[float, ...]:
    if not isinstance(values, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values
    ):
        raise UsageError(f"{what}: expected a list of numbers >= 0")
    return tuple(float(v) for v in values)


def _per_op(values: tuple[float, ...], plan: StepPlan, what: str) -> list[float]:
    """Per-position values of a trace's typical step laid onto the plan's ops (the same count, in order)."""
    if len(values) != len(plan.ops):
        raise UsageError(
            f"{what}: the trace's step has {len(values)} collectives, the replayed step {len(plan.ops)}: "
            "trace the engine at the model, TP and T of the sweep"
        )
    return list(values)


@dataclass(frozen=True)
class ComputeSpec:
    """`[run] compute`: the work each rank runs between two collectives."""

    kind: ComputeKind = "none"
    # uniform: µs of compute in every gap between two collectives.
    us: float = 0.0
    # trace: the `commprof trace --json` file, and from it the median gap before each op of the typical step, µs.
    path: str | None = None
    gaps: tuple[float, ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, text: Any) -> ComputeSpec:
        """ "none", "uniform:<µs>", "trace:<path>" or "gemm"; UsageError naming the allowed forms."""
        if not isinstance(text, str):
            raise UsageError(f"expected {COMPUTE_FORMS}, got {text!r}")
        kind, _, value = text.strip().partition(":")
        if kind in ("none", "gemm") and not value:
            return cls(kind)  # type: ignore[arg-type]
        if kind == "uniform":
            try:
                us = float(value)
            except ValueError:
                us = -1.0
            if not (math.isfinite(us) and us > 0):
                raise UsageError(f"uniform:<µs> needs a time > 0 in µs, got {text!r}")
            return cls("uniform", us=us)
        if kind == "trace" and value:
            data = _trace_json(value, "compute")
            if "gaps_us" not in data:
                raise UsageError(f"compute trace:{value}: no gaps_us (written by `commprof trace --json` on a trace)")
            return cls("trace", path=value, gaps=_numbers(data["gaps_us"], f"compute trace:{value}: gaps_us"))
        raise UsageError(f"expected {COMPUTE_FORMS}, got {text!r}")

    @property
    def text(self) -> str:
        """As written in a sweep file."""
        if self.kind == "uniform":
            return f"uniform:{self.us:g}"
        return f"trace:{self.path}" if self.kind == "trace" else self.kind

    def gaps_us(self, plan: StepPlan) -> list[float]:
        """Per op, the compute before it, µs (the first op has none: the step starts with it); gemm: none here,
        its length is what the GEMMs take (`gemm_shapes`)."""
        if self.kind == "uniform":
            return [0.0] + [self.us] * (len(plan.ops) - 1)
        if self.kind == "trace":
            return [0.0] + _per_op(self.gaps, plan, f"compute trace:{self.path}")[1:]
        return [0.0] * len(plan.ops)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "us": self.us, "path": self.path, "gaps": list(self.gaps)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ComputeSpec:
        if not data:
            return cls()
        return cls(data["kind"], float(data["us"]), data.get("path"), tuple(data.get("gaps", ())))


def gemm_shapes(plan: StepPlan, intermediate: int | None) -> list[tuple[tuple[int, int], tuple[int, int]] | None]:
    """Per op, the two GEMMs the engine runs before it on each rank (rows x hidden -> hidden x I/TP -> I/TP x
    hidden: an MLP's up and down projections at this op's rows), None before the first op and before collectives
    that are not layer all-reduces. I: the model's intermediate size (4 x hidden where the config gives none);
    before an MoE layer's all-reduce, the width of the experts one token visits (ModelShape.moe_mlp_width), as one
    MLP: the FLOPs and weight bytes of a decode token's experts."""
    hidden = plan.model.hidden_size
    dense = max((intermediate or 4 * hidden) // plan.tp, 1)
    moe = max(plan.model.moe_mlp_width // plan.tp, 1) if plan.model.moe_mlp_width else dense
    shapes: list[tuple[tuple[int, int], tuple[int, int]] | None] = []
    for op in plan.ops:
        if op.index == 0 or op.collective != "all_reduce" or op.shape[-1] != hidden:
            shapes.append(None)
            continue
        rows = math.prod(op.shape) // hidden
        shapes.append(((rows, hidden), (hidden, moe if op.site_kind == "moe" else dense)))
    return shapes


def gemm_bytes(plan: StepPlan, intermediate: int | None, element_bytes: int) -> int:
    """What the GEMM spacer allocates on each rank for `plan`: per op, its activations, weights and output."""
    total = 0
    for shapes in gemm_shapes(plan, intermediate):
        if shapes is not None:
            (rows, hidden), (_, inner) = shapes
            total += (rows * hidden + 2 * hidden * inner + rows * inner) * element_bytes
    return total


@dataclass(frozen=True)
class SkewSpec:
    """`[run] skew`: ranks that start each collective late."""

    # One late rank by a fixed time: its rank and µs per collective.
    rank: int | None = None
    us: float = 0.0
    # trace: the `commprof trace --json` file, and from it each rank's arrival lag before each op, µs.
    path: str | None = None
    lags: tuple[tuple[float, ...], ...] = field(default=(), repr=False)

    @property
    def active(self) -> bool:
        return (self.rank is not None and self.us > 0) or bool(self.lags)

    @classmethod
    def parse(cls, raw: Any) -> SkewSpec:
        """{rank = r, us = µs} or "trace:<path>"; UsageError naming the allowed forms."""
        if isinstance(raw, dict):
            unknown = sorted(set(raw) - {"rank", "us"})
            rank, us = raw.get("rank"), raw.get("us")
            if unknown or not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
                raise UsageError(f"expected {SKEW_FORMS} with an integer rank >= 0, got {raw!r}")
            if isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) or us <= 0:
                raise UsageError(f"skew us must be a time > 0 in µs, got {us!r}")
            return cls(rank=rank, us=float(us))
        if isinstance(raw, str) and raw.startswith("trace:") and len(raw) > len("trace:"):
            path = raw.removeprefix("trace:")
            data = _trace_json(path, "skew")
            lags = data.get("arrival_lag_us")
            if not isinstance(lags, list) or len(lags) < 2:
                raise UsageError(
                    f"skew trace:{path}: no arrival_lag_us of two or more ranks (written by `commprof trace --json` "
                    "on one trace per rank)"
                )
            return cls(path=path, lags=tuple(_numbers(r, f"skew trace:{path}: arrival_lag_us") for r in lags))
        raise UsageError(f"expected {SKEW_FORMS}, got {raw!r}")

    def check_world(self, world_size: int) -> None:
        """UsageError when the late rank or the trace's ranks do not fit the launch."""
        if self.rank is not None and self.rank >= world_size:
            raise UsageError(f"skew: rank {self.rank} is not one of the launch's {world_size} ranks")
        if self.lags and len(self.lags) != world_size:
            raise UsageError(f"skew trace:{self.path}: lags of {len(self.lags)} ranks, the launch has {world_size}")

    def lags_us(self, plan: StepPlan, rank: int) -> list[float]:
        """Per op, how late `rank` starts it, µs."""
        if self.lags:
            return _per_op(self.lags[rank], plan, f"skew trace:{self.path}")
        late = self.us if rank == self.rank else 0.0
        return [late] * len(plan.ops)

    @property
    def text(self) -> str:
        if self.lags:
            return f"trace:{self.path}"
        return f"rank {self.rank} late by {self.us:g} µs" if self.active else "none"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "us": self.us, "path": self.path, "lags": [list(r) for r in self.lags]}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SkewSpec:
        if not data:
            return cls()
        return cls(data.get("rank"), float(data["us"]), data.get("path"), tuple(tuple(r) for r in data["lags"]))


def describe(compute: ComputeSpec, skew: SkewSpec) -> dict[str, Any] | None:
    """What a record says about the step's spacing ({"compute", "skew"} as people read them); None: neither."""
    if compute.kind == "none" and not skew.active:
        return None
    return {"compute": compute.text, "skew": skew.text}


def describe_request(spacing: dict[str, Any]) -> dict[str, Any] | None:
    """`describe` of a trial request's spacing ({"compute": ComputeSpec dict, "skew": SkewSpec dict})."""
    return describe(ComputeSpec.from_dict(spacing.get("compute")), SkewSpec.from_dict(spacing.get("skew")))
