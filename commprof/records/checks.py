"""What a record or a meta.json read from a file must be before anything uses it: the types its writers'
TypedDicts (commprof.records.schema) declare, finite non-negative times, integers no run could exceed. One
reader's check each (records.files calls them), so a corrupt or edited file is refused, not believed."""

from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from commprof.env_names import export_name_problem
from commprof.records.point_ids import is_point_id, is_run_id
from commprof.records.schema import (
    KINDS,
    MODES,
    REQUIRED_FIELDS,
    SOURCES,
    STATUSES,
    CollectiveRecord,
    CrossoverRecord,
    RunMeta,
    StepRecord,
)

# Fields a reader relies on; every other field may be absent (an older writer), and is then None.
_MUST_HAVE = {
    "step": (*REQUIRED_FIELDS, "kind", "tokens", "mode"),
    "collective": (*REQUIRED_FIELDS, "kind", "collective", "bytes"),
    "crossover": (*REQUIRED_FIELDS, "kind", "collective", "mode", "baseline"),
}
# Durations, bandwidths and their spreads: finite and >= 0 wherever they appear.
_STATS_TIMES = ("min", "median", "mean", "p90", "p99", "max", "cv")
_NON_NEGATIVE = ("duration_s", "measure_s", "time_us", "algbw_gbps", "busbw_gbps", "impl_us", "baseline_us")


# Integers a reader computes with: beyond these no sweep, log or nccl-tests run could have written them.
_MAX_RANKS = 1 << 20
_MAX_BYTES = 1 << 48
_INTEGER_RANGES = {
    "tokens": (1, 1 << 24),
    "tp": (1, _MAX_RANKS),
    "world_size": (1, _MAX_RANKS),
    "bytes": (0, _MAX_BYTES),  # nccl-tests -b 0 times a 0-byte collective; a crossover size is checked below
    "count": (0, _MAX_BYTES),
    "iterations": (0, 1 << 31),
    "warmup": (0, 1 << 31),
    "rounds": (0, 1 << 31),
    "search_round": (0, 1 << 31),
    "step_bytes": (1, _MAX_BYTES),
    "line": (0, 1 << 40),
    "wrong": (0, _MAX_BYTES),
}
_CHOICE_RANGES = {"bytes": (0, _MAX_BYTES), "channels": (1, 64), "count": (1, 1 << 40)}


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
    for name, value in (record["point"].get("env") or {}).items():
        if refused := export_name_problem(name):
            return f"point.env: {refused}"
        if "\x00" in value:
            return f"point.env.{name}: holds a NUL character"
    for name, (low, high) in _INTEGER_RANGES.items():
        value = record.get(name)
        if isinstance(value, int) and not low <= value <= high:
            return f"{name} {value} is out of range (allowed: {low}..{high})"
    if kind == "crossover" and record.get("bytes") == 0:
        return "bytes 0 is below 1"
    problem = _nccl_problem(record.get("nccl")) if kind == "step" else None
    if problem:
        return f"nccl.{problem}"
    return _time_problem(record)


def _nccl_problem(nccl: Any) -> str | None:
    """Sizes and counts of NCCL's choices out of any range NCCL could log (the types are checked already)."""
    for index, choice in enumerate((nccl or {}).get("choices") or ()):
        for name, (low, high) in _CHOICE_RANGES.items():
            value = choice.get(name)
            if value is not None and not low <= value <= high:
                return f"choices[{index}].{name} {value} is out of range (allowed: {low}..{high})"
    for name in ("nranks", "nnodes", "channels"):
        value = (nccl or {}).get(name)
        if value is not None and not 1 <= value <= _MAX_RANKS:
            return f"{name} {value} is out of range (allowed: 1..{_MAX_RANKS})"
    return None


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
    sites = columns.get("sites")
    if isinstance(sites, list):  # columnar: one item per op in every column
        uneven = next((k for k, v in columns.items() if isinstance(v, list) and len(v) != len(sites)), None)
        if uneven is not None:
            return f"op_us.{uneven}: {len(columns[uneven])} item(s) for {len(sites)} op site(s)"
    for key, accepts in _OP_COLUMNS.items():
        if not all(accepts(value) for value in columns.get(key) or ()):
            return f"op_us.{key}: an item of the wrong type"
    for key in _STATS_TIMES:
        if not _non_negative(columns.get(key) or ()):
            return f"op_us.{key}: a negative or non-finite time"
    if not _non_negative((record.get("per_iteration") or {}).values()):
        return "per_iteration: a negative or non-finite time"
    return None


_OP_COLUMNS = {
    "sites": lambda v: isinstance(v, str),
    "collectives": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_BYTES,
    "draft": lambda v: isinstance(v, bool),
}


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
        problems = [_type_problem(value, option) for option in options]
        if None in problems:
            return None
        # the option of the value's own JSON type says what is wrong inside it ("choices: an item: bytes: ...")
        inner = [p for o, p in zip(options, problems) if not p.startswith("expected ")]
        if inner:
            return inner[0]
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


def meta_problem(meta: Any) -> str | None:
    """Why a meta.json read from a file cannot be used, in a few words, or None."""
    if not isinstance(meta, dict):
        return "not a JSON object"
    for name, hint in _typeddict_hints(RunMeta).items():
        if name in meta and (problem := _type_problem(meta[name], hint)):
            return f"{name}: {problem}"
    for name in ("world_size", "nnodes"):
        if meta.get(name) is not None and not 1 <= meta[name] <= _MAX_RANKS:
            return f"{name} {meta[name]} is out of range (allowed: 1..{_MAX_RANKS})"
    count = (meta.get("topology") or {}).get("gpus")
    if isinstance(count, int) and not 1 <= count <= _MAX_RANKS:
        return f"topology.gpus {count} is out of range (allowed: 1..{_MAX_RANKS})"
    plan = meta.get("plan") or {}
    for name, (low, high) in (("tp", (1, _MAX_RANKS)), ("iterations", (0, 1 << 31)), ("warmup", (0, 1 << 31))):
        if plan.get(name) is not None and not low <= plan[name] <= high:
            return f"plan.{name} {plan[name]} is out of range (allowed: {low}..{high})"
    if any(not 1 <= t <= 1 << 24 for t in plan.get("tokens") or ()):
        return "plan.tokens: a T out of range (allowed: 1..16777216)"
    if plan.get("point_timeout_s") is not None and not 0 < plan["point_timeout_s"] <= 86400 * 7:
        return f"plan.point_timeout_s {plan['point_timeout_s']} is out of range (allowed: above 0, at most a week)"
    return None
