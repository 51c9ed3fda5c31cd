"""Every field of a record and of meta.json, set to a string, a list, null, 1e30 or NaN: the report reads it,
or refuses it in one line naming file and line or key; never a traceback. Cases the reader refuses cost
nothing more; the cases it accepts are analysed as `commprof report` would analyse them."""

import copy
import json
import warnings
from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.report.analysis.run_analysis import analyze_run
from commprof.report.command import load_run
from commprof.report.flags import report_options, sweep_options
from tests.report_fixtures import base_points, make_meta, make_records, write_run

VALUES = {"string": "x", "list": [1], "null": None, "1e30": 1e30, "NaN": float("nan")}
CLI = {"compute_ms": None, "draft_ms": None, "accept": None, "baseline": None, "allow_partial": True}
REAL_META = Path(__file__).parent / "fixtures" / "report" / "cpu-smoke-gloo" / "meta.json"


def _paths(value, prefix=(), depth=3):
    """Every key path into `value` (the first item of a list of objects stands for them all)."""
    if prefix:
        yield prefix
    if len(prefix) >= depth:
        return
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key), depth)
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        yield from _paths(value[0], (*prefix, 0), depth)


def _set(target, path, value):
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _report_reads(run_dir: Path) -> None:
    """What `commprof report` does before rendering: read the run once, at its edge, then analyse it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run_id, records, meta, _ = load_run(run_dir)
        except UsageError as refused:
            assert "\n" not in str(refused)
            return
        try:
            analyze_run(run_id, records, meta, report_options(CLI, sweep_options(meta)), str(run_dir))
        except UsageError as refused:
            assert "\n" not in str(refused)


RECORDS = make_records("fuzz", points=base_points()[:2], tokens=(1,))
TARGET = next(i for i, r in enumerate(RECORDS) if r["kind"] == "step" and r["status"] == "ok" and r.get("nccl"))
RECORD_PATHS = [p for p in _paths(RECORDS[TARGET]) if p[0] != "op_us" or len(p) == 2]
META = {**json.loads(REAL_META.read_text()), **make_meta("fuzz")}
META_PATHS = list(_paths(META))


@pytest.mark.parametrize("name", VALUES)
def test_every_record_field_gives_a_report_or_one_line(tmp_path, name):
    for number, path in enumerate(RECORD_PATHS):
        records = copy.deepcopy(RECORDS)
        _set(records[TARGET], path, copy.deepcopy(VALUES[name]))
        _report_reads(write_run(tmp_path / str(number), "fuzz", records=records, meta=make_meta("fuzz")))


@pytest.mark.parametrize("name", VALUES)
def test_every_meta_field_gives_a_report_or_one_line(tmp_path, name):
    for number, path in enumerate(META_PATHS):
        meta = copy.deepcopy(META)
        _set(meta, path, copy.deepcopy(VALUES[name]))
        _report_reads(write_run(tmp_path / str(number), "fuzz", records=RECORDS, meta=meta))
