"""results.jsonl and meta.json: what the writers accept and the readers refuse."""

import json
import math
from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.records.checks import record_problem
from commprof.records.files import (
    append_records,
    duplicated_measurements,
    new_run_dir,
    read_records,
    write_json,
)
from commprof.records.point_ids import is_run_id
from commprof.records.run_meta import read_meta
from tests.report_fixtures import make_records

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "cpu-smoke-gloo"


def test_non_finite_floats_are_written_as_null(tmp_path):
    path = tmp_path / "results.jsonl"
    record = {**_valid_step(), "check": {"max_abs_err": math.nan, "tolerance": math.inf}}
    record["point"] = {**record["point"], "options": {"x": [-math.inf]}}
    append_records(path, [record])
    line = path.read_text()
    assert "NaN" not in line and "Infinity" not in line
    json.loads(line, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))  # strict JSON
    (back,) = read_records(path)
    assert back["check"] == {"max_abs_err": None, "tolerance": None}
    assert back["point"]["options"] == {"x": [None]}


def test_meta_with_non_finite_floats_is_strict_json(tmp_path):
    write_json(tmp_path / "meta.json", {"fit": {"error": math.nan}})
    assert json.loads((tmp_path / "meta.json").read_text()) == {"fit": {"error": None}}


def test_duplicated_measurements_are_found():
    def step(point, tokens, mode):
        return {"kind": "step", "point_id": point, "tokens": tokens, "mode": mode}

    records = [step("p000", 1, "eager"), step("p000", 1, "graph"), step("p001", 1, "eager"), step("p000", 1, "eager")]
    records.append({"kind": "collective", "point_id": "p000", "tokens": 1, "mode": "eager"})
    assert duplicated_measurements(records) == {("p000", 1, "eager"): 2}


def _valid_step() -> dict:
    return json.loads((FIXTURE / "results.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize(
    "change,problem",
    [
        ({"step_us": "fast"}, "step_us: expected an object or null, got a string"),
        ({"tokens": "4"}, "tokens: expected an integer, got a string"),
        ({"point": ["p000"]}, "point: expected an object, got a list"),
        ({"point_id": "../../etc"}, "point id '../../etc' is not one"),
        ({"run_id": "../x"}, "run id '../x' is not one"),
        ({"status": "great"}, "status 'great' is not one of"),
        ({"kind": "mystery"}, "kind 'mystery' is not one of"),
        ({"step_us": {"median": -8850.0}}, "step_us: a negative or non-finite time"),
        ({"duration_s": -1.0}, "duration_s -1.0 is negative or not finite"),
        ({"rank_step_median_us": [10.0, -1.0]}, "rank_step_median_us: a negative or non-finite time"),
    ],
)
def test_records_a_reader_cannot_use_are_refused_naming_file_and_line(tmp_path, change, problem):
    path = tmp_path / "results.jsonl"
    bad = _valid_step()
    bad.update(change)
    path.write_text(json.dumps(_valid_step()) + "\n" + json.dumps(bad) + "\n" + json.dumps(_valid_step()) + "\n")
    with pytest.raises(UsageError) as refused:
        read_records(path)
    assert str(refused.value).startswith(f"{path}:2: not a usable record: ")
    assert problem in str(refused.value)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_times_written_by_hand_are_refused(tmp_path, literal):
    line = json.dumps(_valid_step()).replace('"median":', f'"median":{literal},"x":', 1)
    (tmp_path / "results.jsonl").write_text(line + "\n" + json.dumps(_valid_step()) + "\n")
    with pytest.raises(UsageError, match=r"results.jsonl:1: not a usable record: step_us"):
        read_records(tmp_path / "results.jsonl")


def test_the_real_gloo_run_and_freshly_built_records_are_usable():
    assert len(read_records(FIXTURE / "results.jsonl")) == 28
    for record in make_records("fresh"):
        assert record_problem(record) is None, record_problem(record)


def test_meta_with_a_run_id_that_is_a_path_is_refused(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"run_id": "../../outside"}))
    with pytest.raises(UsageError, match="run_id '../../outside' is not a run id"):
        read_meta(tmp_path)


def test_run_folder_names_hold_only_run_id_characters(tmp_path):
    run_dir = new_run_dir(tmp_path, "a\x00b/../c d\ne-tp2-gloo")
    assert run_dir.parent == tmp_path and is_run_id(run_dir.name)
    assert run_dir.name.endswith("-a-b-..-c-d-e-tp2-gloo")
