"""`--profile` on a real 2-rank gloo sweep (the GPU smoke's launch, tests/shared_runs.py), then `commprof trace` on
its traces: the replayed step is the plan, and the timed records are the timed pass's alone."""

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.records.files import read_records


@pytest.mark.processes
def test_profiled_sweep_traces_match_the_plan(smoke_sweep, capsys):
    assert smoke_sweep["code"] == 0, smoke_sweep["output"][-3000:]
    run_dir = Path(smoke_sweep["run"])
    profile = run_dir / "points" / "p000" / "profile" / "T4"
    assert sorted(p.name for p in profile.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    # The timed records are the timed pass's alone: three timed steps, nothing from the profiling pass.
    records = [r for r in read_records(run_dir / "results.jsonl") if r["mode"] == "eager"]
    assert len(records) == 1 and records[0]["status"] == "ok" and records[0]["step_us"]["n"] == 3
    assert main(["trace", str(profile), "--model", "kimi-k2.5", "--tp", "2", "--tokens", "4", "--json"]) == 0
    account = json.loads(capsys.readouterr().out)
    assert account["plan_match"] is True, account["differences"]
    assert account["steps"]["found_by"] == "3 ProfilerStep annotations"
    assert [t["rank"] for t in account["traces"]] == [0, 1] and account["skew"]["steps"] == 3
