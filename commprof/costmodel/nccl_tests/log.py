"""What an nccl-tests log holds once parsed: runs, their rows, and the numbers' rules (shared by both formats)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from commprof.records.values import MAX_COUNT, MAX_RANKS

# nccl-tests type names -> commprof dtype names (others kept as nccl-tests spells them).
DTYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "f8e4m3": "float8_e4m3",
    "f8e5m2": "float8_e5m2",
}

# The *_perf binary a command line or a JSON file's args name ("all_reduce_perf", "..._perf_mpi").
PROGRAM = re.compile(r"\b([a-z_]+)_perf(?:_mpi)?\b")


@dataclass
class Row:
    """One size of one run: out-of-place and in-place measurements (either may be absent)."""

    line: int
    bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    places: dict[str, dict] = field(default_factory=dict)  # "out_of_place" / "in_place" -> values
    process: int | None = None  # the MPI process that printed it, where `mpirun --tag-output` says


@dataclass
class Run:
    """One invocation of a *_perf binary: its header facts and its table."""

    line: int
    collective: str | None
    ranks: int | None
    nthread: int | None = None
    ngpus: int | None = None
    graph: bool = False
    iterations: int | None = None
    warmup: int | None = None
    devices: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # the host each rank line names ("Rank 0 ... on <host>")
    nccl_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the NCCL settings the log states it ran under
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    rows: list[Row] = field(default_factory=list)

    @property
    def nodes(self) -> int | None:
        """The distinct hosts the rank lines name; None where the log names none."""
        return len(set(self.hosts)) if self.hosts else None

    def summary(self) -> dict:
        return {
            "line": self.line,
            "collective": self.collective,
            "ranks": self.ranks,
            "nthread": self.nthread,
            "ngpus": self.ngpus,
            "graph": self.graph,
            "iterations": self.iterations,
            "warmup": self.warmup,
            "devices": self.devices,
            "hosts": sorted(set(self.hosts)),
            "nodes": self.nodes,
            "nccl_version": self.nccl_version,
            "env": dict(self.env),
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "out_of_bounds": self.out_of_bounds,
            "rows": len(self.rows),
        }


@dataclass
class ParsedLog:
    path: str
    runs: list[Run]
    warnings: list[str]

    @property
    def nccl_versions(self) -> list[str]:
        return sorted({r.nccl_version for r in self.runs if r.nccl_version})

    @property
    def gpu_names(self) -> list[str]:
        """The distinct GPU names the log's device lines print (after "[busid]")."""
        return sorted({name for r in self.runs for d in r.devices if (name := gpu_name(d))})


def gpu_name(device: str) -> str:
    """A "Using devices" entry's GPU name, without the bus id before it."""
    return device.split("]", 1)[-1].strip() if "]" in device else device.strip()


def optional_float(token: str) -> float | None:
    """A float column; "N/A", NaN and infinities become None."""
    if token.upper() in ("N/A", "NAN", "-NAN"):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


class RefusedRow(ValueError):
    """A row whose numbers cannot be a measurement (a negative or non-finite time)."""


MAX_LATENCY_US = 3.6e9  # an hour: no one collective of a benchmark takes longer


def latency(token) -> float:
    """A time column: a finite number > 0 (a collective takes time) of at most an hour, else RefusedRow saying
    why."""
    value = float(token)
    if not math.isfinite(value):
        raise RefusedRow(f"time {token} is not a latency")
    if value < 0:
        raise RefusedRow(f"time {token} is negative")
    if value == 0:
        raise RefusedRow(f"time {token} is zero")
    if value > MAX_LATENCY_US:
        raise RefusedRow(f"time {token} µs is above an hour")
    return value


def size(token, what: str = "size") -> int:
    """A size or count column: an integer in 0..2^48 (bytes no GPU holds beyond), else RefusedRow."""
    value = int(token)
    if not 0 <= value <= 1 << 48:
        raise RefusedRow(f"{what} {token} is out of range")
    return value


class LongNumber(ValueError):
    """A number no nccl-tests log states: more digits than any count has (int() of 5000 raises its own refusal)."""


def stated_count(digits: str) -> int:
    """A count a log's text states (threads, GPUs, iterations, a process's rank, a version code); LongNumber past
    18 digits."""
    if len(digits) > 18:
        raise LongNumber(f"a {len(digits)}-digit number")
    return int(digits)


def header_problem(run: Run) -> str | None:
    """Why the counts a run's header states cannot be a run's (a string, a float, 10**18 GPUs), or None: a record
    and meta.json bound them alike (commprof.records.values), and import must not write what they refuse."""
    for name, value, most in (
        ("nThread", run.nthread, MAX_RANKS),
        ("nGpus", run.ngpus, MAX_RANKS),
        ("ranks", run.ranks, MAX_RANKS),
        ("iters", run.iterations, MAX_COUNT),
        ("warmup iters", run.warmup, MAX_COUNT),
        ("out of bounds values", run.out_of_bounds, MAX_COUNT),
    ):
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most):
            return f"{name} {str(value)[:40]} is not a count (allowed: 0..{most})"
    return None
