"""results.jsonl and meta.json: what the writers accept and the readers refuse."""

import json
import math

from commprof.records.files import append_records, duplicated_measurements, read_records, write_json


def test_non_finite_floats_are_written_as_null(tmp_path):
    path = tmp_path / "results.jsonl"
    record = {"schema": 1, "kind": "step", "check": {"max_abs_err": math.nan, "tolerance": math.inf}, "x": [-math.inf]}
    append_records(path, [record])
    line = path.read_text()
    assert "NaN" not in line and "Infinity" not in line
    json.loads(line, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))  # strict JSON
    (back,) = read_records(path)
    assert back["check"] == {"max_abs_err": None, "tolerance": None} and back["x"] == [None]


def test_meta_with_non_finite_floats_is_strict_json(tmp_path):
    write_json(tmp_path / "meta.json", {"fit": {"error": math.nan}})
    assert json.loads((tmp_path / "meta.json").read_text()) == {"fit": {"error": None}}


def test_duplicated_measurements_are_found():
    def step(point, tokens, mode):
        return {"kind": "step", "point_id": point, "tokens": tokens, "mode": mode}

    records = [step("p000", 1, "eager"), step("p000", 1, "graph"), step("p001", 1, "eager"), step("p000", 1, "eager")]
    records.append({"kind": "collective", "point_id": "p000", "tokens": 1, "mode": "eager"})
    assert duplicated_measurements(records) == {("p000", 1, "eager"): 2}
