"""What a results record is: the step, the collective and the crossover record, one TypedDict and one
constructor each, and the values their fields take. docs/results-schema.md documents every field.

Every writer (the sweep, the simulator, the nccl-tests importer, the tests' builders) builds records with
`step_record` / `collective_record` / `crossover_record`, so every record of a kind has the same fields in the same order; readers
(the report, calibration, resume) read them back as these types.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal, TypedDict, get_args

from commprof.records.point_ids import is_point_id, is_run_id

SCHEMA_VERSION = 2
# Versions this commprof reads. Version 1 said "model" where version 2 says "simulated" (source and timing of
# cost-model predictions); `upgraded` reads a version-1 record as version 2.
READABLE_VERSIONS = (1, 2)

# Where a record's numbers come from: timed here, predicted by the cost model, or imported from nccl-tests.
Source = Literal["measured", "simulated", "nccl-tests"]
SOURCES: tuple[Source, ...] = get_args(Source)
KINDS = ("step", "collective", "crossover")
Mode = Literal["eager", "graph"]  # run as issued; captured once in a CUDA graph and replayed
MODES: tuple[Mode, ...] = get_args(Mode)
# The modes in the order searches and answers take them: graph first, the mode a serving engine decodes in.
GRAPH_FIRST: tuple[Mode, ...] = ("graph", "eager")
# All-reduce + residual add + RMSNorm in one collective (fused kinds), set against the unfused reference.
FUSED = "all_reduce+rmsnorm"
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
    repeat: int  # the baseline measured again (baseline-repeats.jsonl): which re-measurement; absent: the first


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
    op_us: dict[str, list] | None  # per-op Stats, columnar, with "sites", "collectives", "draft", "bytes"; eager
    # (simulated: both modes)
    rank_step_median_us: list[float] | None  # each rank's median step time
    check: dict[str, Any] | None  # correctness, agreed across ranks
    impl_detail: str | None  # what exactly ran where the implementation chooses at setup
    fused_rmsnorm: bool  # the layer all-reduces include residual add + RMSNorm
    nccl: dict[str, Any] | None  # what NCCL did, from its INFO log (or the cost model's choices)
    iterations: int | None  # timed steps
    warmup: int | None  # warm-up steps
    duration_s: float | None  # wall time of the whole point on the controller
    measure_s: float | None  # wall time of this (T, mode) inside the worker
    kernel_model: dict[str, Any] | None  # simulated non-NCCL points: the kernel model behind them, its expected error
    # What ran between the collectives ({"compute": "uniform:500", "skew": "rank 1 late by 1000 µs"}); None: nothing,
    # the collectives back to back.
    spacing: dict[str, Any] | None
    compute_us: Stats | None  # the step's compute alone, per step (timed on its own): communication = step - compute
    wait_us: Stats | None  # per step, the first rank's wait at each op for the last arrival, summed over ops
    wait_clock: str | None  # the clock arrivals were stamped on ("host_monotonic", "cuda_globaltimer"), or why not


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


class CrossoverRecord(_Record):
    """One message size measured by a crossover search: an implementation setting (`point`) against the baseline
    at that size, both timed in the same worker processes: kind "crossover". A search that could not run at all
    leaves one record with its status and no size."""

    collective: str  # "all_reduce", or "all_reduce+rmsnorm" for fused kinds (against their unfused reference)
    mode: str  # MODES: the searches in graph and eager mode are separate
    bytes: int | None  # the all-reduce's size; None: the search did not run (status says why)
    dtype: str | None
    impl_us: float | None  # the setting's time per all-reduce: max over ranks of the min over rounds
    baseline_us: float | None  # the baseline's, timed the same way in the same processes
    baseline: Point  # what the setting is timed against (the sweep's baseline, or the unfused reference)
    search_round: int | None  # which measure() round of the search timed this size (1 = the powers of two)
    step_bytes: int | None  # the search's resolution: bisection stops when a boundary is this narrow
    rounds: int | None  # timed rounds per size
    warmup: int | None
    model_error: dict[str, Any] | None  # simulated: {"impl_pct", "baseline_pct", "basis"}, the models' errors


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


def crossover_record(**fields: Any) -> CrossoverRecord:
    """A crossover record with every CrossoverRecord field, in order; required: source, run_id, point_id, point,
    status, collective, mode and baseline."""
    record = _build(CrossoverRecord, "crossover", (*_REQUIRED, "collective", "mode", "baseline"), fields)
    if record["mode"] not in MODES:
        raise ValueError(f"crossover record: mode {record['mode']!r} is not one of {MODES}")
    return record


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


# --- reading: what a record from a file must be before anything uses it ---------------------------------------

# Fields a reader relies on; every other field may be absent (an older writer), and is then None.
_MUST_HAVE = {
    "step": (*_REQUIRED, "kind", "tokens", "mode"),
    "collective": (*_REQUIRED, "kind", "collective", "bytes"),
    "crossover": (*_REQUIRED, "kind", "collective", "mode", "baseline"),
}
# Durations, bandwidths and their spreads: finite and >= 0 wherever they appear.
_STATS_TIMES = ("min", "median", "mean", "p90", "p99", "cv")
_NON_NEGATIVE = ("duration_s", "measure_s", "time_us", "algbw_gbps", "busbw_gbps", "impl_us", "baseline_us")


def record_problem(record: Any) -> str | None:
    """Why a record read from a file cannot be used, in a few words, or None: a field of the wrong type, an
    unknown kind / source / status / mode, an id that is no id, a negative or non-finite time."""
    if not isinstance(record, dict):
        return "not a JSON object"
    kind = record.get("kind")
    if kind not in KINDS:
        return f"kind {kind!r} is not one of {', '.join(KINDS)}"
    missing = [name for name in _MUST_HAVE[kind] if record.get(name) is None]
    if missing:
        return f"no {', '.join(missing)}"
    for name, accepts in _predicates(kind).items():
        if name in record and not accepts(record[name]):
            return f"{name}: {_type_problem(record[name], _hints(kind)[name])}"
    for name, allowed in (("source", SOURCES), ("status", STATUSES), ("mode", MODES)):
        if name in record and record[name] not in allowed:
            return f"{name} {record[name]!r} is not one of {', '.join(allowed)}"
    if not is_run_id(record["run_id"]):
        return f"run id {record['run_id']!r} is not one (letters, digits, '.', '_', '-')"
    for point_id in (record["point_id"], record["point"].get("point_id", record["point_id"])):
        if not is_point_id(point_id):
            return f"point id {point_id!r} is not one (p000, p001, ..., s1-p000, ...)"
    if kind == "step" and record["tokens"] < 1:
        return f"tokens {record['tokens']} is below 1"
    if kind == "crossover" and record.get("bytes") is not None and record["bytes"] < 1:
        return f"bytes {record['bytes']} is below 1"
    return _time_problem(record)


def _time_problem(record: dict) -> str | None:
    for name in _NON_NEGATIVE:
        if not _non_negative([record.get(name)]):
            return f"{name} {record[name]!r} is negative or not finite"
    for name in ("step_us", "compute_us", "wait_us"):
        stats = record.get(name)
        if stats and not _non_negative(stats.get(key) for key in _STATS_TIMES):
            return f"{name}: a negative or non-finite time"
    if not _non_negative(record.get("rank_step_median_us") or ()):
        return "rank_step_median_us: a negative or non-finite time"
    columns = record.get("op_us") or {}
    for key in _STATS_TIMES:
        if not _non_negative(columns.get(key) or ()):
            return f"op_us.{key}: a negative or non-finite time"
    if not _non_negative((record.get("per_iteration") or {}).values()):
        return "per_iteration: a negative or non-finite time"
    return None


def _non_negative(values) -> bool:
    """Every value that is not None is a finite number >= 0 (in C: min and fsum, not a Python loop per value)."""
    numbers = [v for v in values if v is not None]
    if not numbers:
        return True
    try:
        return min(numbers) >= 0 and math.isfinite(math.fsum(numbers))
    except (TypeError, ValueError, OverflowError):
        return False


RECORD_TYPES = {"step": StepRecord, "collective": CollectiveRecord, "crossover": CrossoverRecord}


def _hints(kind: str) -> dict[str, Any]:
    return _typeddict_hints(RECORD_TYPES[kind])


@functools.cache
def _typeddict_hints(record_type: Any) -> dict[str, Any]:
    return typing.get_type_hints(record_type)


@functools.cache
def _predicates(kind: str) -> dict[str, Callable[[Any], bool]]:
    """Each field's type check, compiled once from its annotation (reading 10,000 records stays fast)."""
    return {name: _predicate(hint) for name, hint in _hints(kind).items()}


def _predicate(hint: Any) -> Callable[[Any], bool]:
    """A fast yes / no for `_type_problem(value, hint) is None`."""
    if hint is Any:
        return lambda value: True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_predicate(option) for option in typing.get_args(hint)]
        return lambda value: any(accepts(value) for accepts in options)
    if hint is type(None):
        return lambda value: value is None
    if typing.is_typeddict(hint):
        fields = {key: _predicate(inner) for key, inner in _typeddict_hints(hint).items()}
        return lambda value: (
            isinstance(value, dict) and all(accepts(value[key]) for key, accepts in fields.items() if key in value)
        )
    base = origin or hint
    accepts_base = _BASE_CHECKS[base]
    args = typing.get_args(hint)
    if base is dict and args and args[1] is not Any:
        item = _predicate(args[1])
        return lambda value: accepts_base(value) and all(item(v) for v in value.values())
    if base is list and args and args[0] is not Any:
        item = _predicate(args[0])
        return lambda value: accepts_base(value) and all(item(v) for v in value)
    return accepts_base


_BASE_CHECKS: dict[Any, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    str: lambda v: isinstance(v, str),
    dict: lambda v: isinstance(v, dict),
    list: lambda v: isinstance(v, list),
}


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why `value` (parsed JSON) is not of type `hint` (a field's annotation), or None."""
    if hint is Any:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if any(_type_problem(value, option) is None for option in options):
            return None
        return f"expected {' or '.join(_type_name(o) for o in options)}, got {_json_type(value)}"
    if hint is type(None):
        return None if value is None else f"expected null, got {_json_type(value)}"
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return f"expected an object, got {_json_type(value)}"
        for key, inner in _typeddict_hints(hint).items():
            if key in value and (problem := _type_problem(value[key], inner)):
                return f"{key}: {problem}"
        return None
    base = origin or hint
    if not _BASE_CHECKS[base](value):
        return f"expected {_type_name(hint)}, got {_json_type(value)}"
    args = typing.get_args(hint)
    if base is dict and args and args[1] is not Any:
        bad = next((v for v in value.values() if _type_problem(v, args[1])), None)
        return None if bad is None else f"a value: {_type_problem(bad, args[1])}"
    if base is list and args and args[0] is not Any:
        bad = next((v for v in value if _type_problem(v, args[0])), None)
        return None if bad is None else f"an item: {_type_problem(bad, args[0])}"
    return None


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    base = typing.get_origin(hint) or hint
    names = {bool: "true/false", int: "an integer", float: "a finite number", str: "a string", list: "a list"}
    return names.get(base, "an object")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )
