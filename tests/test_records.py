"""results.jsonl and meta.json: what the writers accept and the readers refuse."""

import functools
import json
import math
from pathlib import Path

import pytest

from commprof import textfiles
from commprof.errors import UsageError
from commprof.records import files
from commprof.records.checks import OP_STATISTICS, record_problem
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


@pytest.mark.parametrize("line", ["[1, 2]", '"step"', "7", "null"])
def test_a_line_that_is_json_but_no_object_is_refused_as_such(tmp_path, line):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_valid_step()) + "\n" + line + "\n" + json.dumps(_valid_step()) + "\n")
    with pytest.raises(UsageError, match=r"results\.jsonl:2: not a usable record: not a JSON object$"):
        read_records(path)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_times_written_by_hand_are_refused(tmp_path, literal):
    line = json.dumps(_valid_step()).replace('"median":', f'"median":{literal},"x":', 1)
    (tmp_path / "results.jsonl").write_text(line + "\n" + json.dumps(_valid_step()) + "\n")
    with pytest.raises(UsageError, match=r"results.jsonl:1: not a usable record: step_us"):
        read_records(tmp_path / "results.jsonl")


def _with_ops(tmp_path: Path, label: str = "NCCL defaults") -> tuple[Path, list[dict]]:
    """A results.jsonl of freshly built records (op_us on the eager ones), every point labelled `label`."""
    records = make_records("ops")
    for record in records:
        record["point"]["label"] = label
    path = tmp_path / "results.jsonl"
    append_records(path, records)
    return path, records


@pytest.mark.parametrize("label", ["NCCL defaults", "défauts"], ids=["plain", "read-line-by-line"])
def test_a_reading_of_some_op_statistics_keeps_those_and_the_same_records_otherwise(tmp_path, label):
    path, _ = _with_ops(tmp_path, label)
    whole, kept = read_records(path), read_records(path, ("median", "p90"))
    assert any(record.get("op_us") for record in kept)
    for full, part in zip(whole, kept, strict=True):
        if full.get("op_us"):
            dropped = [name for name in OP_STATISTICS if name not in ("median", "p90")]
            assert {k: v for k, v in full["op_us"].items() if k not in dropped} == part["op_us"]
            full = {**full, "op_us": part["op_us"]}
        assert full == part


@pytest.mark.parametrize("column", [name for name in OP_STATISTICS if name not in ("median", "p90")])
def test_the_first_problem_is_said_whichever_statistics_are_read(tmp_path, column):
    path, records = _with_ops(tmp_path)
    with_ops = [r for r in records if r.get("op_us")]
    with_ops[1]["op_us"][column][7] = -1.0
    with_ops[5]["op_us"]["median"][0] = -1.0  # later in the file: the first problem is the one said
    path.unlink()
    append_records(path, records)
    refusals = []
    for read in (lambda: read_records(path), lambda: read_records(path, ("median",))):
        with pytest.raises(UsageError) as refused:
            read()
        refusals.append(str(refused.value))
    assert refusals == [f"{path}:2: not a usable record: op_us.{column}: a negative or non-finite time"] * 2


@pytest.mark.parametrize("ending", [b"\n", b"", b"\n\n"], ids=["newline", "none", "blank-line"])
def test_records_read_a_few_bytes_at_a_time_are_the_records_read_at_once(tmp_path, monkeypatch, recwarn, ending):
    path, _ = _with_ops(tmp_path)
    path.write_bytes(path.read_bytes().rstrip(b"\n") + ending)
    whole = read_records(path, ("median",))
    monkeypatch.setattr(files, "read_blocks", functools.partial(textfiles.read_blocks, block=997))
    assert read_records(path, ("median",)) == whole and len(whole) == 80


def test_a_statistic_op_us_has_not_is_a_programming_error(tmp_path):
    path, _ = _with_ops(tmp_path)
    with pytest.raises(TypeError, match="op_us has no statistic p50"):
        read_records(path, ("median", "p50"))


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
