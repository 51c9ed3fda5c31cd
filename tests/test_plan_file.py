"""plan.jsonl: what a sweep planned, read back as the report counts it; the model resolved once per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.records.files import append_plan, read_plan
from commprof.records.plan_file import PLAN_FILE, ended_line, points_line, searches_line, stages_line

SWEEP = Path(__file__).parents[1] / "sweeps" / "cpu-smoke.toml"


def test_a_resumed_sweeps_later_lines_replace_the_earlier(tmp_path):
    append_plan(tmp_path, [stages_line([(1, "cx", "searches")]), points_line(0, ["p000", "p001"], 4)])
    search = {"point_id": "p001", "mode": "eager", "sizes": [256]}
    append_plan(tmp_path, [searches_line(1, [search]), points_line(0, ["p000"], 4), ended_line(1, "p001", "eager")])
    plan = read_plan(tmp_path)
    assert plan.stages == {1: ("cx", "searches")} and plan.points == {0: (("p000",), 4)}
    assert plan.searches == {1: (("p001", "eager"),)} and plan.ended == {(1, "p001", "eager")}


def test_no_file_is_no_plan_a_torn_last_line_is_skipped_and_a_bad_line_refused(tmp_path):
    assert read_plan(tmp_path) is None
    append_plan(tmp_path, [points_line(0, ["p000"], 2)])
    with (tmp_path / PLAN_FILE).open("a") as f:
        f.write('{"line": "poi')
    with pytest.warns(UserWarning, match="truncated last line"):
        assert read_plan(tmp_path).points == {0: (("p000",), 2)}
    (tmp_path / PLAN_FILE).write_text('{"line": "guess"}\n{"line": "points"}\n')
    with pytest.raises(UsageError, match=r"plan.jsonl:1: not a plan line"):
        read_plan(tmp_path)


def test_a_line_no_sweep_plans_is_not_built():
    with pytest.raises(ValueError):
        points_line(0, ["not a point"], 2)
    with pytest.raises(ValueError):
        searches_line(1, [{"point_id": "p001", "mode": "compiled", "sizes": []}])


def test_simulate_writes_its_plan_and_resolves_the_model_once(tmp_path, monkeypatch):
    import commprof.sweep.planning.run_table as run_table
    import commprof.sweep.planning.spec as spec

    calls = []
    real = run_table.load_model

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_table, "load_model", counted)
    monkeypatch.setattr(spec, "load_model", counted)
    assert main(["simulate", "--topology", "pcie-4gpu", "--sweep", str(SWEEP), "--out", str(tmp_path)]) == 0
    assert len(calls) == 1
    (run_dir,) = tmp_path.iterdir()
    plan = read_plan(run_dir)
    assert plan.stages == {1: ("confirm", "points")} and len(plan.points[0][0]) == 5 and 1 in plan.points
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"][0]["run"]
    assert summary["complete"] is True and summary["progress"].startswith("7 of 7 points done")
