"""What a results record is: the step record and the collective record, one TypedDict and one constructor each,
and the values their fields take. docs/results-schema.md documents every field.

Every writer (the sweep, the simulator, the nccl-tests importer, the tests' builders) builds records with
`step_record` / `collective_record`, so every record of a kind has the same fields in the same order; readers
(the report, calibration, resume) read them back as these types.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypedDict

SCHEMA_VERSION = 2
# Versions this commprof reads. Version 1 said "model" where version 2 says "simulated" (source and timing of
# cost-model predictions); `upgraded` reads a version-1 record as version 2.
READABLE_VERSIONS = (1, 2)

# Where a record's numbers come from: timed here, predicted by the cost model, or imported from nccl-tests.
SOURCES = ("measured", "simulated", "nccl-tests")
KINDS = ("step", "collective")
MODES = ("eager", "graph")
# Trial outcomes. "ok" is the only one whose numbers are a tuning result.
STATUSES = (
    "ok",  # measured and verified
    "wrong",  # ran, but results differ from the exact reduction (eager)
    "capture_failed",  # CUDA-graph capture raised
    "replay_wrong",  # graph replay gave results that differ from the exact reduction
    "timeout",  # killed after the point's time limit, on every rank
    "crashed",  # a worker died: signal, abort or non-zero exit
    "unsupported",  # the implementation or mode does not apply here; message says why
    "error",  # a Python exception in the trial; message has it
)
# Statuses that mean "the setting does not work here"; "unsupported" only means it does not apply.
FAILED_STATUSES = tuple(s for s in STATUSES if s not in ("ok", "unsupported"))


class Stats(TypedDict):
    """A latency over the timed steps (or one op's over the steps), µs."""

    n: int  # samples
    min: float
    median: float
    mean: float
    p90: float
    p99: float
    cv: float  # standard deviation / mean, unitless


class Point(TypedDict, total=False):
    """The configuration a record measured (commprof.sweep.points.SweepPoint.to_dict())."""

    point_id: str
    label: str
    impl: str  # the all-reduce implementation (commprof.impls)
    env: dict[str, str]  # only what the point sets on top of the run's environment
    options: dict[str, Any]  # the implementation's options
    stage: int  # the staged search's stage that produced the point


class _Record(TypedDict):
    """The fields every record has."""

    schema: int  # SCHEMA_VERSION
    kind: str  # KINDS
    source: str  # SOURCES
    run_id: str  # the run folder's name
    point_id: str  # point_ids.py
    point: Point
    backend: str | None  # "nccl" or "gloo"; None for imported or simulated records without one
    world_size: int | None  # ranks in the process group
    status: str  # STATUSES
    message: str | None  # why a status is not "ok"; notes on an "ok" simulated record
    time: str  # ISO-8601 UTC time the record was built
    calibration: str | None  # simulated records: which calibration ("nccl-prior" or a file) predicted them


class StepRecord(_Record):
    """One replayed step plan at one T in one mode: kind "step"."""

    model: str | None  # the LLM's name (commprof.planner.models)
    phase: str | None  # "decode" or "verify"
    tp: int | None  # tensor-parallel degree
    tokens: int  # T, tokens in the step
    dtype: str | None  # activation dtype
    plan: dict[str, Any] | None  # StepPlan.summary(): collective counts, bytes, hidden size, layers
    mode: str  # MODES
    timing: str | None  # "cuda_events", "cpu_clock" or "simulated"
    step_us: Stats | None  # per-step latency over the timed steps
    op_us: dict[str, list] | None  # per-op Stats, columnar, with "sites", "collectives", "draft", "bytes"; eager only
    rank_step_median_us: list[float] | None  # each rank's median step time
    check: dict[str, Any] | None  # correctness, agreed across ranks
    impl_detail: str | None  # what exactly ran where the implementation chooses at setup
    fused_rmsnorm: bool  # the layer all-reduces include residual add + RMSNorm
    nccl: dict[str, Any] | None  # what NCCL did, from its INFO log (or the cost model's choices)
    iterations: int | None  # timed steps
    warmup: int | None  # warm-up steps
    duration_s: float | None  # wall time of the whole point on the controller
    measure_s: float | None  # wall time of this (T, mode) inside the worker


class _CollectiveExtras(TypedDict, total=False):
    per_iteration: dict[str, float]  # nccl-tests -I columns: min_us, max_us, p99_us, cv_pct


class CollectiveRecord(_Record, _CollectiveExtras):
    """One collective at one size, as nccl-tests reports it: kind "collective"."""

    collective: str  # "all_reduce", "all_gather", ...
    bytes: int  # message size (nccl-tests' "size")
    count: int | None  # elements
    dtype: str | None
    redop: str | None
    root: int | None  # -1 where none
    in_place: bool  # nccl-tests' in-place column
    graph: bool  # measured inside a CUDA graph (nccl-tests -G)
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None  # algbw × 2(n−1)/n for all-reduce
    wrong: int | None  # nccl-tests' #wrong (None for "N/A")
    file: str | None  # where an imported row came from
    line: int | None


# What a builder may leave out (None otherwise); the rest must be given.
_REQUIRED = ("source", "run_id", "point_id", "point", "status")
_FLAGS = {"fused_rmsnorm": False, "in_place": False, "graph": False}


def step_record(**fields: Any) -> StepRecord:
    """A step record with every StepRecord field, in order; required: source, run_id, point_id, point, status,
    tokens and mode (the rest default to None, fused_rmsnorm to False, time to now)."""
    record = _build(StepRecord, "step", (*_REQUIRED, "tokens", "mode"), fields)
    if record["mode"] not in MODES:
        raise ValueError(f"step record: mode {record['mode']!r} is not one of {MODES}")
    return record


def collective_record(**fields: Any) -> CollectiveRecord:
    """A collective record with every CollectiveRecord field, in order (per_iteration only where given);
    required: source, run_id, point_id, point, status, collective and bytes (in_place, graph default to False)."""
    return _build(CollectiveRecord, "collective", (*_REQUIRED, "collective", "bytes"), fields)


def _build(record_type: Any, kind: str, required: tuple[str, ...], fields: dict[str, Any]) -> Any:
    optional = record_type.__optional_keys__
    names = [n for n in record_type.__annotations__ if n not in optional] + [n for n in optional if n in fields]
    unknown = sorted(set(fields) - set(record_type.__annotations__))
    missing = [name for name in required if name not in fields]
    if unknown or missing:
        raise TypeError(f"{kind} record: unknown field(s) {unknown}, missing field(s) {missing}")
    if fields["source"] not in SOURCES:
        raise ValueError(f"{kind} record: source {fields['source']!r} is not one of {SOURCES}")
    if fields["status"] not in STATUSES:
        raise ValueError(f"{kind} record: status {fields['status']!r} is not one of {STATUSES}")
    values = {"schema": SCHEMA_VERSION, "kind": kind, **fields}
    if values.get("time") is None:
        values["time"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {name: values.get(name, _FLAGS.get(name)) for name in names}


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A record of a readable older version as this version writes it, changed in place (version 1: source and
    timing "model" become "simulated")."""
    if record.get("schema") == 1:
        for name in ("source", "timing"):
            if record.get(name) == "model":
                record[name] = "simulated"
        record["schema"] = SCHEMA_VERSION
    return record
