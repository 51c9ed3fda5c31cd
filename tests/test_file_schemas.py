"""The files a user writes (sweep files, calibrations, topologies) and plan.jsonl read as typed structures through
the records' one error adapter: every problem at once, one line each, in the words the hand readers used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from commprof.costmodel.calibration_file import CalibrationFile, CostModelTable, LineFit
from commprof.costmodel.kernels import FloorTable, KernelTable
from commprof.costmodel.topology import LinkTable, TopologyFile
from commprof.errors import UsageError
from commprof.problems import Boolean, Problems, String, choice, integer, number, table
from commprof.records.plan_file import LINE_TYPES, PlannedStage, SearchEntry, parse_plan
from commprof.sweep import parse_sweep
from commprof.sweep.planning.config import ReportSection, SweepFile
from commprof.sweep.planning.run_table import RunSection
from commprof.sweep.planning.stage_config import CrossoverTable, RefineTable


class Inner(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    low: integer(1, 8)
    flag: Boolean = False


class Example(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    kind: choice(("a", "b"), "a kind")
    rate: number(0.0, strict=True) = 1.0
    name: String = "x"
    inner: table(Inner) = msgspec.field(default_factory=lambda: Inner(1))
    sizes: list[integer(0)] = []
    extra: dict[str, Any] = {}


def _lines(raw: dict) -> tuple[Any, list[str]]:
    problems = Problems("f.toml")
    return problems.read(raw, Example), problems.errors


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({}, ["f.toml: kind: missing (allowed: a, b)"]),
        ({"kind": "c"}, ["f.toml: kind: 'c' is not a kind (allowed: a, b)"]),
        ({"kind": 3}, ["f.toml: kind: 3 is not a kind (allowed: a, b)"]),
        ({"kind": "a", "rate": 0}, ["f.toml: rate: 0 is out of range (allowed: a number > 0)"]),
        ({"kind": "a", "rate": float("nan")}, ["f.toml: rate: nan is not a finite number (allowed: a number > 0)"]),
        ({"kind": "a", "rate": True}, ["f.toml: rate: expected a number > 0, got True"]),
        ({"kind": "a", "name": 3}, ["f.toml: name: expected a string, got 3"]),
        ({"kind": "a", "inner": 3}, ["f.toml: inner: expected a table, got int"]),
        ({"kind": "a", "inner": {}}, ["f.toml: inner.low: missing (allowed: an integer >= 1 and <= 8)"]),
        ({"kind": "a", "inner": {"low": 9}}, ["f.toml: inner.low: 9 is above 8 (allowed: an integer >= 1 and <= 8)"]),
        ({"kind": "a", "inner": {"low": 0}}, ["f.toml: inner.low: 0 is below 1 (allowed: an integer >= 1 and <= 8)"]),
        ({"kind": "a", "inner": {"low": 1, "hi": 2}}, ["f.toml: inner.hi: unknown key (allowed: low, flag)"]),
        ({"kind": "a", "inner": {"low": 1, "flag": 1}}, ["f.toml: inner.flag: expected true or false, got 1"]),
        ({"kind": "a", "sizes": [1, -1, "x"]}, ["f.toml: sizes[1]: -1 is below 0 (allowed: an integer >= 0)",
                                                "f.toml: sizes[2]: expected an integer >= 0, got 'x'"]),
    ],
)  # fmt: skip
def test_a_typed_field_says_what_it_wants(raw, expected):
    assert _lines(raw)[1] == expected


def test_every_problem_at_once_and_what_could_be_read_is_kept():
    value, lines = _lines({"kind": "z", "zz": 1, "rate": -1, "inner": {"low": 0, "flag": True}, "sizes": [2, -1]})
    assert [line.split(": ")[1] for line in lines] == ["zz", "kind", "rate", "inner.low", "sizes[1]"]
    # a field with a problem takes its default (None where it has none); a table or list keeps what it could read
    assert (value.kind, value.rate, value.inner.flag, value.inner.low, value.sizes) == (
        None,
        1.0,
        True,
        None,
        [2, None],
    )


def test_a_sweep_files_type_and_its_other_rules_report_in_one_pass():
    with pytest.raises(UsageError) as caught:
        parse_sweep("[run]\niterations = 0\nmodel = 'gpt-9'\n[axes]\nNCCL_PROTO = ['LL129']\n", "s.toml")
    assert [line.split(": ")[1] for line in str(caught.value).splitlines()] == [
        "run.iterations",
        "run.model",
        "axes.NCCL_PROTO[0]",
    ]


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"line": "guess"}', "line 'guess' is none of stages, points, searches, ended"),
        ('{"line": "points", "stage": 0, "point_ids": []}', "no per_point"),
        ('{"line": "points", "stage": 0, "point_ids": ["../x"], "per_point": 1}', "point id '../x' is not one"),
        ('{"line": "ended", "stage": -1, "point_id": "p001", "mode": "graph"}', "stage -1 is not an integer from 0"),
        ('{"line": "ended", "stage": 1, "point_id": "p001", "mode": "compiled"}', "mode 'compiled' is not one of"),
        (
            '{"line": "stages", "stages": [{"stage": 1, "name": 3, "unit": "points"}]}',
            "stages: an item: name: expected a",
        ),
    ],
)
def test_a_plan_line_of_another_shape_is_one_line_naming_its_field(line, problem):
    with pytest.raises(UsageError) as caught:
        parse_plan(f"{line}\n", Path("plan.jsonl"))
    assert str(caught.value).startswith(f"plan.jsonl:1: not a plan line: {problem}")


@pytest.mark.parametrize(
    "structure",
    [SweepFile, RunSection, ReportSection, RefineTable, CrossoverTable, CalibrationFile, CostModelTable, LineFit,
     TopologyFile, LinkTable, KernelTable, FloorTable,
     PlannedStage, SearchEntry, *LINE_TYPES.values()],
)  # fmt: skip
def test_every_file_structure_is_frozen_and_says_what_it_is(structure):
    assert structure.__struct_config__.frozen and structure.__doc__
