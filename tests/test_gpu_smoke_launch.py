"""The smoke's real launch on CPU: torchrun on its loopback rendezvous runs a 2-rank sweep on gloo with --profile,
and the baseline's trace is read back by `commprof trace` against the plan, as the second step does on GPUs (the
launch is shared with other tests: tests/shared_runs.py)."""

import sys
from pathlib import Path

import pytest

from commprof.gpu_smoke import extended
from commprof.gpu_smoke.steps import Steps
from commprof.gpu_smoke.verdicts import PASS
from commprof.records.files import read_records


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_a_two_rank_sweep_on_the_loopback_rendezvous_and_its_trace_read_back(smoke_sweep, tmp_path):
    assert smoke_sweep["code"] == 0, smoke_sweep["output"][-2000:]
    run_dir = Path(smoke_sweep["run"])
    records = read_records(run_dir / "results.jsonl")
    assert {(r["mode"], r["status"]) for r in records} == {("eager", "ok"), ("graph", "unsupported")}
    assert all(r["backend"] == "gloo" and r["tp"] == 2 for r in records)
    folder = extended.trace_folder(run_dir)
    assert folder is not None and sorted(p.name for p in folder.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    steps = Steps(tmp_path, 120, {"trace": 10}, echo=lambda text: None)
    cmd = [sys.executable, "-m", "commprof", "trace", str(folder), "--model", extended.MODEL, "--tp", "2"]
    code, stdout, output = steps.run("trace", [*cmd, "--tokens", str(extended.TRACE_TOKENS), "--json"])
    verdict = extended.trace_verdict("trace", code, stdout, output)
    assert verdict.status == PASS and "(124 ops): plan_match true" in verdict.detail, verdict
