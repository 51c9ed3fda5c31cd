"""plan.jsonl: what a sweep planned, written into the run folder as it plans it (the stages, each stage's points,
each crossover search's sizes, each search that ended), so the report counts planned against done from the run
folder alone. One constructor per line kind and one parser; records.files appends (fsynced) and reads the file."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

import msgspec

from commprof.errors import UsageError
from commprof.records.schema import Mode, PointId
from commprof.records.validate import bounded, explain, problem_of
from commprof.terminal import one_line

PLAN_FILE = "plan.jsonl"
MAX_COUNT = 10**9  # more stages or records per point than any sweep plans
MAX_STAGE_NAME = 200  # characters of a stage's name
Unit = Literal["points", "searches"]  # a refinement stage plans points; a crossover stage, searches
Stage = bounded(int, "{path} {value} is not an integer from {low} to {high}", ge=0, le=MAX_COUNT)


class PlannedSearch(TypedDict):
    point_id: str  # the setting searched against the baseline
    mode: str  # MODES
    sizes: list[int]  # the step sizes searched beside the powers of two (commprof.evidence.sustained_runs)


class PlannedStage(msgspec.Struct, frozen=True):
    """One stage after stage 0, as a "stages" line lists it."""

    stage: Stage
    name: bounded(
        str, f"{{path}}: not a string of at most {MAX_STAGE_NAME} characters", max_length=MAX_STAGE_NAME
    )  # shown as the stage's
    unit: Unit


class StagesLine(msgspec.Struct, frozen=True):
    """The sweep's stages after stage 0: written once, before stage 0."""

    stages: list[PlannedStage]


class PointsLine(msgspec.Struct, frozen=True):
    """A stage's points, as planned."""

    stage: Stage
    point_ids: list[PointId]
    per_point: bounded(int, "{path} {value} is not an integer from {low} to {high}", ge=1, le=MAX_COUNT)  # the
    # records (T x mode) a point has when it finished


class SearchEntry(msgspec.Struct, frozen=True):
    """One crossover search (setting x mode) of a "searches" line."""

    point_id: PointId  # the setting searched against the baseline
    mode: Mode
    sizes: list[int] = []  # the step sizes searched beside the powers of two (commprof.evidence.sustained_runs)


class SearchesLine(msgspec.Struct, frozen=True):
    """A crossover stage's searches, as planned."""

    stage: Stage
    searches: list[SearchEntry]


class EndedLine(msgspec.Struct, frozen=True):
    """One search ran to its end (a search's sizes depend on its times, so its end is recorded, not foreseen)."""

    stage: Stage
    point_id: PointId
    mode: Mode


# Each line says which it is in its "line" key.
LINE_TYPES = {"stages": StagesLine, "points": PointsLine, "searches": SearchesLine, "ended": EndedLine}


def _checked(line: dict[str, Any]) -> dict[str, Any]:
    """A line as written, refused (ValueError) where it is not one a sweep plans."""
    problem = problem_of({k: v for k, v in line.items() if k != "line"}, LINE_TYPES[line["line"]])
    if problem:
        raise ValueError(f"plan: {problem}")
    return line


def stages_line(stages: list[tuple[int, str, Unit]]) -> dict[str, Any]:
    """The sweep's stages after stage 0, (index, name, unit) each: written once, before stage 0."""
    return _checked(
        {"line": "stages", "stages": [{"stage": i, "name": name, "unit": unit} for i, name, unit in stages]}
    )


def points_line(stage: int, point_ids: list[str], per_point: int) -> dict[str, Any]:
    """A stage's points, as planned; `per_point`: the records (T x mode) a point has when it finished."""
    return _checked({"line": "points", "stage": stage, "point_ids": list(point_ids), "per_point": per_point})


def searches_line(stage: int, searches: list[PlannedSearch]) -> dict[str, Any]:
    """A crossover stage's searches (setting x mode), as planned."""
    return _checked({"line": "searches", "stage": stage, "searches": [dict(s) for s in searches]})


def ended_line(stage: int, point_id: str, mode: str) -> dict[str, Any]:
    """One search ran to its end (a search's sizes depend on its times, so its end is recorded, not foreseen)."""
    return _checked({"line": "ended", "stage": stage, "point_id": point_id, "mode": mode})


@dataclass(frozen=True)
class Plan:
    """plan.jsonl read back: a resumed sweep plans again, and its later line for a stage replaces the earlier."""

    stages: dict[int, tuple[str, Unit]] = field(default_factory=dict)  # after stage 0: name and unit
    points: dict[int, tuple[tuple[str, ...], int]] = field(default_factory=dict)  # stage -> point ids, per point
    searches: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # stage -> (point id, mode)
    ended: set[tuple[int, str, str]] = field(default_factory=set)  # (stage, point id, mode)


def parse_plan(text: str, path: Path) -> Plan:
    """plan.jsonl's text read back; UsageError naming the file, line and field for a line that is no plan line (a
    torn last line, from a writer killed mid-append, is skipped with a warning). Stage names come back printable."""
    plan = Plan()
    lines = text.splitlines()
    for number, text_line in enumerate(lines, start=1):
        if not text_line.strip():
            continue
        try:
            _add(plan, _decode(text_line))
        except _NotJson as exc:
            if number == len(lines) and not text.endswith("\n"):
                warnings.warn(f"{path}:{number}: truncated last line skipped (the run was interrupted)", stacklevel=3)
                continue
            raise UsageError(f"{path}:{number}: not a plan line (not JSON: {one_line(exc)})") from None
        except ValueError as exc:
            raise UsageError(f"{path}:{number}: not a plan line: {one_line(exc)[:300]}") from None
    return plan


class _NotJson(ValueError):
    """A line that is no JSON at all (a torn last line, or a corrupt file)."""


def _decode(text: str) -> StagesLine | PointsLine | SearchesLine | EndedLine:
    """One line as its typed structure; ValueError saying why it is no plan line."""
    try:
        raw = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):  # nested deeper than msgspec's stack: json.loads names it
        try:  # its words: a constant (NaN, Infinity) or a number beyond a float (1e400, read as inf) by name
            raw = json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise _NotJson(str(exc)) from None
    kind = raw.get("line") if isinstance(raw, dict) else None
    if not isinstance(kind, str) or kind not in LINE_TYPES:
        raise ValueError(f"line {one_line(repr(kind))[:40]} is none of {', '.join(LINE_TYPES)}")
    raw = {k: v for k, v in raw.items() if k != "line"}
    try:
        return msgspec.convert(raw, LINE_TYPES[kind])
    except msgspec.ValidationError as refused:
        raise ValueError(explain(refused, raw, LINE_TYPES[kind])) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _add(plan: Plan, line: StagesLine | PointsLine | SearchesLine | EndedLine) -> None:
    """One more line read into `plan` (its dicts and set, filled as it is read): a stage's later line replaces
    its earlier."""
    if isinstance(line, StagesLine):
        plan.stages.clear()
        plan.stages.update({s.stage: (one_line(s.name), s.unit) for s in line.stages})
    elif isinstance(line, PointsLine):
        plan.points[line.stage] = (tuple(line.point_ids), line.per_point)
    elif isinstance(line, SearchesLine):
        plan.searches[line.stage] = tuple((s.point_id, s.mode) for s in line.searches)
    else:
        plan.ended.add((line.stage, line.point_id, line.mode))
