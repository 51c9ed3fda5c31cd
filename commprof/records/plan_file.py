"""plan.jsonl: what a sweep planned, written into the run folder as it plans it (the stages, each stage's points,
each crossover search's sizes, each search that ended), so the report counts planned against done from the run
folder alone. One constructor per line kind and one parser; records.files appends (fsynced) and reads the file."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from commprof.errors import UsageError
from commprof.records.point_ids import is_point_id
from commprof.records.schema import MODES
from commprof.terminal import one_line

PLAN_FILE = "plan.jsonl"
MAX_COUNT = 10**9  # more stages or records per point than any sweep plans
Unit = Literal["points", "searches"]  # a refinement stage plans points; a crossover stage, searches


class PlannedSearch(TypedDict):
    point_id: str  # the setting searched against the baseline
    mode: str  # MODES
    sizes: list[int]  # the step sizes searched beside the powers of two (commprof.evidence.sustained_runs)


def stages_line(stages: list[tuple[int, str, Unit]]) -> dict[str, Any]:
    """The sweep's stages after stage 0, (index, name, unit) each: written once, before stage 0."""
    return {"line": "stages", "stages": [{"stage": i, "name": name, "unit": unit} for i, name, unit in stages]}


def points_line(stage: int, point_ids: list[str], per_point: int) -> dict[str, Any]:
    """A stage's points, as planned; `per_point`: the records (T x mode) a point has when it finished."""
    bad = [p for p in point_ids if not is_point_id(p)]
    if bad or per_point < 1:
        raise ValueError(f"plan: point ids {bad} or records per point {per_point} are not ones a sweep plans")
    return {"line": "points", "stage": stage, "point_ids": list(point_ids), "per_point": per_point}


def searches_line(stage: int, searches: list[PlannedSearch]) -> dict[str, Any]:
    """A crossover stage's searches (setting x mode), as planned."""
    if any(s["mode"] not in MODES or not is_point_id(s["point_id"]) for s in searches):
        raise ValueError(f"plan: a search of stage {stage} names no point or no mode of {MODES}")
    return {"line": "searches", "stage": stage, "searches": [dict(s) for s in searches]}


def ended_line(stage: int, point_id: str, mode: str) -> dict[str, Any]:
    """One search ran to its end (a search's sizes depend on its times, so its end is recorded, not foreseen)."""
    return {"line": "ended", "stage": stage, "point_id": point_id, "mode": mode}


@dataclass(frozen=True)
class Plan:
    """plan.jsonl read back: a resumed sweep plans again, and its later line for a stage replaces the earlier."""

    stages: dict[int, tuple[str, Unit]] = field(default_factory=dict)  # after stage 0: name and unit
    points: dict[int, tuple[tuple[str, ...], int]] = field(default_factory=dict)  # stage -> point ids, per point
    searches: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # stage -> (point id, mode)
    ended: frozenset[tuple[int, str, str]] = frozenset()  # (stage, point id, mode)


def parse_plan(text: str, path: Path) -> Plan:
    """plan.jsonl's text read back; UsageError naming the file, line and field for a line that is no plan line (a
    torn last line, from a writer killed mid-append, is skipped with a warning). Stage names come back printable."""
    stages: dict[int, tuple[str, Unit]] = {}
    points: dict[int, tuple[tuple[str, ...], int]] = {}
    searches: dict[int, tuple[tuple[str, str], ...]] = {}
    ended: set[tuple[int, str, str]] = set()
    lines = text.splitlines()
    for number, text_line in enumerate(lines, start=1):
        if not text_line.strip():
            continue
        try:
            line = json.loads(text_line, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            if number == len(lines) and not text.endswith("\n"):
                warnings.warn(f"{path}:{number}: truncated last line skipped (the run was interrupted)", stacklevel=3)
                continue
            raise UsageError(f"{path}:{number}: not a plan line (not JSON: {one_line(exc)})") from None
        try:
            kind = line["line"]
            if kind == "stages":
                stages = {_count(s["stage"], 0): (one_line(_text(s["name"])), _unit(s["unit"])) for s in line["stages"]}
            elif kind == "points":
                ids = tuple(_point_id(p) for p in line["point_ids"])
                points[_count(line["stage"], 0)] = (ids, _count(line["per_point"], 1, "per_point"))
            elif kind == "searches":
                pairs = tuple((_point_id(s["point_id"]), _mode(s["mode"])) for s in line["searches"])
                searches[_count(line["stage"], 0)] = pairs
            elif kind == "ended":
                ended.add((_count(line["stage"], 0), _point_id(line["point_id"]), _mode(line["mode"])))
            else:
                raise ValueError(f"line {kind!r} is none of stages, points, searches, ended")
        except KeyError as missing:
            raise UsageError(f"{path}:{number}: not a plan line: no {one_line(missing)}") from None
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path}:{number}: not a plan line: {one_line(exc)}") from None
    return Plan(stages, points, searches, frozenset(ended))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _count(value: Any, minimum: int, name: str = "stage") -> int:
    """A stage index or a count of records: an integer from `minimum` to MAX_COUNT."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_COUNT:
        raise ValueError(f"{name} {one_line(value)[:40]} is not an integer from {minimum} to {MAX_COUNT}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 200:
        raise ValueError(f"name {str(value)[:40]!r} is not a string of at most 200 characters")
    return value


def _point_id(value: Any) -> str:
    if not is_point_id(value):
        raise ValueError(f"{str(value)[:40]!r} is not a point id")
    return value


def _mode(value: Any) -> str:
    if value not in MODES:
        raise ValueError(f"mode {str(value)[:40]!r} is none of {MODES}")
    return value


def _unit(value: Any) -> Unit:
    if value not in ("points", "searches"):
        raise ValueError(f"unit {str(value)[:40]!r} is neither points nor searches")
    return value
