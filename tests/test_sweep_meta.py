"""meta.json of a sweep: versions, sweep file and hash, topology, the doctor's verdicts; --strict refuses."""

import json
from pathlib import Path

import pytest

from commprof.doctor.result import CheckResult
from commprof.errors import UsageError
from commprof.sweep.planning.config import default_sweep
from commprof.sweep.planning.spec import RunOverrides
from commprof.sweep.running.console import SweepConsole
from commprof.sweep.running.run_folder import prepare_run_folder
from commprof.sweep.running.runner import SweepOptions


def _failing_doctor(**kwargs):
    return [CheckResult("acs", "ACS redirect off above the GPUs", "fail", "ReqRedir+ on 00:01.1", [], "setpci ...")]


@pytest.mark.processes
def test_meta_records_sweep_topology_and_doctor(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    spec = default_sweep(RunOverrides(tokens=(1, 4)))
    prepare_run_folder(tmp_path, "gloo", spec, SweepOptions(out=tmp_path, argv=["x"]), True, SweepConsole(False))
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["backend"] == "gloo" and meta["world_size"] == 2 and meta["versions"]["torch"]
    assert meta["plan"]["tokens"] == [1, 4] and meta["plan"]["tp"] == 2
    assert meta["sweep"]["content"] == spec.content and len(meta["sweep"]["sha256"]) == 64
    assert meta["topology"]["gpus"] == [] or meta["topology"]["gpus"] is None
    assert meta["doctor"]["checks"] and meta["doctor"]["failed"] == []
    assert meta["shared_gpus"] is False


def test_strict_refuses_a_failing_box(tmp_path, monkeypatch):
    import commprof.sweep.running.run_folder

    monkeypatch.setattr(commprof.sweep.running.run_folder, "run_doctor", _failing_doctor)
    spec = default_sweep(RunOverrides(tokens=(1,)))
    options = SweepOptions(out=tmp_path, strict=True)
    with pytest.raises(UsageError, match="acs"):
        prepare_run_folder(tmp_path, "gloo", spec, options, True, SweepConsole(False))
    # Without --strict the verdict is kept with the run, and the sweep goes on.
    prepare_run_folder(tmp_path, "gloo", spec, SweepOptions(out=tmp_path), True, SweepConsole(False))
    assert json.loads(Path(tmp_path, "meta.json").read_text())["doctor"]["failed"] == ["acs"]
