"""The record constructors and the point-id grammar: one definition each, enforced where records are built."""

import json
import re

import pytest

from commprof.errors import UsageError
from commprof.records.files import read_records
from commprof.records.point_ids import BASELINE_POINT_ID, point_id, stage_of
from commprof.records.schema import SCHEMA_VERSION, CollectiveRecord, StepRecord, collective_record, step_record

POINT = {"point_id": "p000", "label": "defaults", "impl": "nccl", "env": {}, "options": {}, "stage": 0}


def test_a_step_record_has_every_field_in_schema_order():
    record = step_record(
        source="measured", run_id="r", point_id="p000", point=POINT, status="ok", tokens=4, mode="graph"
    )
    assert list(record) == list(StepRecord.__annotations__)
    assert record["schema"] == SCHEMA_VERSION and record["kind"] == "step" and record["fused_rmsnorm"] is False
    assert record["step_us"] is None and record["time"].endswith("+00:00")


def test_a_collective_record_keeps_optional_fields_only_when_given():
    common = dict(source="nccl-tests", run_id="r", point_id="p000", point=POINT, status="ok")
    plain = collective_record(**common, collective="all_reduce", bytes=8)
    assert "per_iteration" not in plain and plain["in_place"] is False and plain["graph"] is False
    with_columns = collective_record(**common, collective="all_reduce", bytes=8, per_iteration={"min_us": 1.0})
    assert list(with_columns) == [*plain, "per_iteration"]
    assert set(with_columns) == set(CollectiveRecord.__annotations__)


@pytest.mark.parametrize(
    "fields, problem",
    [
        (dict(tokens=4, mode="graph", colour="red"), "unknown field(s) ['colour']"),
        (dict(tokens=4), "missing field(s) ['mode']"),
        (dict(tokens=4, mode="replayed"), "mode 'replayed' is not one of"),
        (dict(tokens=4, mode="eager", status="fine"), "status 'fine' is not one of"),
        (dict(tokens=4, mode="eager", source="guessed"), "source 'guessed' is not one of"),
    ],
)
def test_a_step_record_refuses_what_the_schema_does_not_know(fields, problem):
    base = dict(source="measured", run_id="r", point_id="p000", point=POINT, status="ok")
    with pytest.raises((TypeError, ValueError), match=re.escape(problem)):
        step_record(**{**base, **fields})


def test_point_id_grammar():
    assert BASELINE_POINT_ID == point_id(0) == "p000"
    assert point_id(12) == "p012" and point_id(3, stage=2) == "s2-p003"
    assert [stage_of(i) for i in ("p000", "p123", "s1-p000", "s12-p004", "not-an-id")] == [0, 0, 1, 12, 0]
    assert all(stage_of(point_id(i, s)) == s for i in (0, 7, 120) for s in (0, 1, 3))


def test_version_1_records_read_as_version_2(tmp_path):
    """Version 1 called simulated numbers "model": read back, they say "simulated"; unknown versions are refused."""
    v1 = {
        **step_record(source="measured", run_id="r", point_id="p000", point=POINT, status="ok", tokens=1, mode="eager")
    }
    v1.update(schema=1, source="model", timing="model")
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(v1) + "\n")
    (record,) = read_records(path)
    assert (record["schema"], record["source"], record["timing"]) == (SCHEMA_VERSION, "simulated", "simulated")
    path.write_text(json.dumps({**v1, "schema": 7}) + "\n")
    with pytest.raises(UsageError, match="results schema version 7, this commprof reads versions 1, 2"):
        read_records(path)
