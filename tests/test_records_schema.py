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


def _crafted(tmp_path, change):
    from tests.report_fixtures import make_records

    records = json.loads(json.dumps(make_records("crafted")))
    target = next(r for r in records if r["kind"] == "step" and r.get("nccl"))
    change(target)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, records.index(target) + 1


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda r: r["nccl"].update(choices="ring"), r"nccl: choices: expected a list, got a string"),
        (lambda r: r["nccl"].update(choices=[1]), r"nccl: choices: an item: expected an object, got an integer"),
        (lambda r: r["nccl"].update(transports=["P2P"]), r"nccl: transports: expected an object, got a list"),
        (lambda r: r["nccl"]["choices"][0].update(bytes="x"), r"choices: an item: bytes: expected an integer"),
        (lambda r: r["nccl"]["choices"][0].update(bytes=-1024), r"nccl.choices\[0\].bytes -1024 is out of range"),
        (lambda r: r["nccl"]["choices"][0].update(bytes=10**40), r"nccl.choices\[0\].bytes 10{40} is out of range"),
        (lambda r: r["nccl"].update(nranks=10**30), r"nccl.nranks 1000000000000000000000000000000 is out of range"),
        (lambda r: r.update(tokens=1e30), r"tokens: expected an integer, got a number"),
        (lambda r: r.update(tokens=10**30), r"tokens 1000000000000000000000000000000 is out of range"),
        (lambda r: r.update(world_size=0), r"world_size 0 is out of range"),
        (lambda r: r["plan"].update(hidden_size="x"), r"plan: hidden_size: expected an integer, got a string"),
        (lambda r: r["op_us"]["collectives"].__setitem__(0, 1), r"op_us.collectives: an item of the wrong type"),
    ],
)
def test_crafted_numbers_and_types_are_one_line_naming_file_and_line(tmp_path, change, problem):
    path, line = _crafted(tmp_path, change)
    with pytest.raises(UsageError) as refused:
        read_records(path)
    message = str(refused.value)
    assert f"results.jsonl:{line}: not a usable record: " in message and "\n" not in message
    assert re.search(problem, message), message
    assert "expected an object or null, got an object" not in message


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda m: m["plan"].update(point_timeout_s=float("inf")), r"plan: point_timeout_s: expected a finite number"),
        (lambda m: m["plan"].update(model=7), r"plan: model: expected a string or null, got an integer"),
        (lambda m: m["plan"].update(tokens=[0]), r"plan.tokens: a T out of range"),
        (lambda m: m.update(sweep="x"), r"sweep: expected an object or null, got a string"),
        (lambda m: m.update(world_size=1e30), r"world_size: expected an integer"),
        (lambda m: m.update(env={"NCCL_ALGO": 1}), r"env: a value: expected a string"),
    ],
)
def test_crafted_meta_is_one_line_naming_file_and_key(tmp_path, change, problem):
    from commprof.records.run_meta import read_meta
    from tests.report_fixtures import make_meta

    meta = make_meta("crafted")
    meta["plan"]["point_timeout_s"] = 30.0
    change(meta)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError) as refused:
        read_meta(tmp_path)
    assert "meta.json: not usable run metadata: " in str(refused.value)
    assert re.search(problem, str(refused.value)), str(refused.value)


def _key_paths(value, prefix=""):
    """Every key path in `value` (lists: each item's keys under "[]")."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{prefix}.{key}"
            yield from _key_paths(inner, f"{prefix}.{key}")
    elif isinstance(value, list):
        for inner in value:
            yield from _key_paths(inner, f"{prefix}[]")


def test_every_key_the_writers_write_is_read_back(tmp_path):
    """The reader's types declare every key a writer writes: a key msgspec does not know would be dropped unread."""
    from commprof.cli import main
    from tests.conftest import PCIE8_SWEEP
    from tests.report_fixtures import make_records

    assert (
        main(["simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", str(PCIE8_SWEEP), "--out", str(tmp_path)])
        == 0
    )
    measured = tmp_path / "measured.jsonl"
    measured.write_text("".join(json.dumps(r) + "\n" for r in make_records("measured")))
    paths = [measured, *tmp_path.glob("*/results.jsonl")]
    assert len(paths) == 2
    for path in paths:
        written = [json.loads(line) for line in path.read_text().splitlines()]
        for before, after in zip(written, read_records(path), strict=True):
            assert set(_key_paths(before)) == set(_key_paths(after)), path
