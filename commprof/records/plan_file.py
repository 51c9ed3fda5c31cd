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

PLAN_FILE = "plan.jsonl"
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
    """plan.jsonl's text read back; UsageError naming the file and line for a line that is no plan line (a torn
    last line, from a writer killed mid-append, is skipped with a warning)."""
    stages: dict[int, tuple[str, Unit]] = {}
    points: dict[int, tuple[tuple[str, ...], int]] = {}
    searches: dict[int, tuple[tuple[str, str], ...]] = {}
    ended: set[tuple[int, str, str]] = set()
    lines = text.splitlines()
    for number, text_line in enumerate(lines, start=1):
        if not text_line.strip():
            continue
        try:
            line = json.loads(text_line)
            kind = line["line"]
            if kind == "stages":
                stages = {int(s["stage"]): (str(s["name"]), _unit(s["unit"])) for s in line["stages"]}
            elif kind == "points":
                points[int(line["stage"])] = (tuple(map(str, line["point_ids"])), int(line["per_point"]))
            elif kind == "searches":
                searches[int(line["stage"])] = tuple((str(s["point_id"]), str(s["mode"])) for s in line["searches"])
            elif kind == "ended":
                ended.add((int(line["stage"]), str(line["point_id"]), str(line["mode"])))
            else:
                raise ValueError(kind)
        except (ValueError, KeyError, TypeError, RecursionError):
            if number == len(lines):
                warnings.warn(f"{path}:{number}: truncated last line skipped (the run was interrupted)", stacklevel=3)
                continue
            raise UsageError(f"{path}:{number}: not a plan line") from None
    return Plan(stages, points, searches, frozenset(ended))


def _unit(value: Any) -> Unit:
    if value not in ("points", "searches"):
        raise ValueError(value)
    return value
