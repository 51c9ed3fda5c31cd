"""What a record read from a file must be before anything uses it: its typed structure (records.schema), decoded
and checked by msgspec in C, and the rules a type cannot say (a point's environment names, op_us's columns of one
length each). A corrupt or edited file is refused in one line, not believed."""

from __future__ import annotations

import functools
import json
import typing
from typing import Any

import msgspec

from commprof.env_names import export_name_problem
from commprof.records.schema import KINDS, READABLE_VERSIONS, RECORD_TYPES, OpColumns, StepRecord, upgraded
from commprof.records.validate import explain

# A step record of this version decodes straight into its type; anything else takes the way that explains it.
_STEP = msgspec.json.Decoder(StepRecord)
# op_us's columns that every record of one step plan repeats: a run of 100,000 records would hold each 100,000 times.
PLAN_COLUMNS = ("sites", "collectives", "draft", "bytes")
_PLAN_TYPES = typing.get_type_hints(OpColumns, include_extras=True)
# The sections every record of one point (its point) or of one step plan (its plan summary) repeats, as PLAN_COLUMNS.
SHARED_SECTIONS = ("point", "plan")
_STEP_TYPES = typing.get_type_hints(StepRecord, include_extras=True)


class _OpsOfSharedPlan(OpColumns, total=False):
    """op_us with its plan columns left as text, each decoded once per distinct text (decode_record's `shared`)."""

    sites: msgspec.Raw
    collectives: msgspec.Raw
    draft: msgspec.Raw
    bytes: msgspec.Raw


class _StepOfSharedParts(StepRecord, total=False):
    """A step record with its SHARED_SECTIONS and op_us's PLAN_COLUMNS left as text, each decoded once per distinct
    text."""

    point: msgspec.Raw
    plan: msgspec.Raw
    op_us: _OpsOfSharedPlan | None


_STEP_SHARED = msgspec.json.Decoder(_StepOfSharedParts)
_SHARED_DECODERS = {
    **{name: msgspec.json.Decoder(_STEP_TYPES[name]) for name in SHARED_SECTIONS},
    **{name: msgspec.json.Decoder(_PLAN_TYPES[name]) for name in PLAN_COLUMNS},
}
# op_us's per-op statistics (µs), each a column of OpColumns.
OP_STATISTICS = tuple(name for name in _PLAN_TYPES if name not in PLAN_COLUMNS)


class UnreadableLine(ValueError):
    """A line that is no JSON at all (a killed writer's truncated last line, or a corrupt file)."""


def decode_record(line: bytes | str | memoryview, shared: dict[tuple[str, bytes], Any] | None = None) -> dict[str, Any]:
    """A results.jsonl line as its record (schema.upgraded), every field checked in the one decoding; UnreadableLine
    for no JSON, ValueError saying why a record cannot be used otherwise. `shared`: op_us's plan columns decoded
    once per distinct text, every record holding that text given the one list (pass the same dict for every line of
    a file), and likewise each record's SHARED_SECTIONS."""
    try:
        record = _decode_sharing(line, shared) if shared is not None else _STEP.decode(line)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        try:
            record = _STEP.decode(line)  # what is wrong, said as for any record
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return _decode_slowly(bytes(line) if isinstance(line, memoryview) else line)
    # A shared point was checked once, when first decoded (_decode_sharing).
    problem = _columns_problem(record.get("op_us")) if shared is not None else rule_problem(record)
    if problem:
        raise ValueError(f"not a usable record: {problem}")
    return record


def _decode_sharing(line: bytes | str | memoryview, shared: dict[tuple[str, bytes], Any]) -> dict[str, Any]:
    record = _STEP_SHARED.decode(line)
    columns = record.get("op_us")
    for parts, names in ((record, SHARED_SECTIONS), (columns, PLAN_COLUMNS if columns else ())):
        for name in names:
            if (text := parts.get(name)) is not None:
                key = (name, bytes(text))
                if (part := shared.get(key, shared)) is shared:
                    part = shared[key] = _SHARED_DECODERS[name].decode(key[1])
                    if name == "point" and (problem := _point_problem(part)):
                        raise ValueError(f"not a usable record: {problem}")
                parts[name] = part
    return record


def _decode_slowly(line: bytes | str) -> dict[str, Any]:
    try:
        raw = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):  # nested deeper than msgspec's stack: json.loads names it
        try:
            raw = json.loads(line)  # NaN / Infinity, which a reader refuses below by their field
        except (ValueError, RecursionError):
            raise UnreadableLine("not a JSON record") from None
    if not isinstance(raw, dict):
        raise ValueError("not a usable record: not a JSON object")
    version = raw.get("schema")
    if version not in READABLE_VERSIONS:
        raise ValueError(
            f"results schema version {version!r}, this commprof reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; re-run or use the commprof version that wrote it"
        )
    problem = _problem(upgraded(raw))
    if problem:
        raise ValueError(f"not a usable record: {problem}")
    return msgspec.convert(raw, RECORD_TYPES[raw["kind"]])


def record_problem(record: Any) -> str | None:
    """Why a record (parsed JSON) cannot be used, in a few words, or None: a field of the wrong type, an unknown
    kind / source / status / mode, an id that is no id, a negative or non-finite time, an out-of-range integer."""
    try:
        return _problem(json.loads(json.dumps(record)))  # a record built here may hold numpy numbers
    except (TypeError, ValueError):
        return "not JSON"


def _problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return "not a JSON object"
    kind = record.get("kind")
    if kind not in KINDS:
        return f"kind {kind!r} is not one of {', '.join(KINDS)}"
    try:
        msgspec.convert(record, RECORD_TYPES[kind])
    except msgspec.ValidationError as refused:
        return explain(refused, record, RECORD_TYPES[kind])
    return rule_problem(record)


def rule_problem(record: dict[str, Any]) -> str | None:
    """The rules a typed record may still break: an environment name a shell would run, a NUL in a value, op_us
    columns of unequal length."""
    return _point_problem(record["point"]) or _columns_problem(record.get("op_us"))


def _point_problem(point: dict[str, Any]) -> str | None:
    for name, value in (point.get("env") or {}).items():
        if refused := _export_name_problem(name):
            return f"point.env: {refused}"
        if "\x00" in value:
            return f"point.env.{name}: holds a NUL character"
    return None


@functools.lru_cache(maxsize=4096)
def _export_name_problem(name: str) -> str | None:
    return export_name_problem(name)


def _columns_problem(columns: dict[str, list] | None) -> str | None:
    """op_us is columnar: one item per op site in every column (the items' types are its type's)."""
    if not columns:
        return None
    sites = columns.get("sites")
    if sites is not None and len({len(v) for v in columns.values()} | {len(sites)}) > 1:
        uneven = next(k for k, v in columns.items() if len(v) != len(sites))
        return f"op_us.{uneven}: {len(columns[uneven])} item(s) for {len(sites)} op site(s)"
    return None
