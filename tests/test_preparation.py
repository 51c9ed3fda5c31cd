"""A setting's preparation (tuning, compiling) runs once before its points, in a worker of its own, into a folder
of the setting's own that its points then load: the worker's side on one in-process gloo rank, and the folders and
refusals the controllers derive (the process edge: sweep/running/preparation.py)."""

import json
from pathlib import Path

import torch.distributed as dist

from commprof.planner.models import ModelShape
from commprof.replay.trial import TrialRequest, run_trial
from commprof.sweep.planning.spec import SweepPoint
from commprof.sweep.running.prebuild import build_refusal, preparation_key, preparation_of, state_dir
from tests.distributed import free_port
from tests.trial_requests import trial_request

PLUGIN = "tests.plugins.prepared:Prepared"


def _request(tmp_path: Path, port: int, prefix: str, state: Path, prepare_only: bool) -> TrialRequest:
    return trial_request(
        point=SweepPoint("p001", "prepared", PLUGIN, {}, {"flavour": "b"}).to_dict(),
        model=ModelShape("tiny", 2, 64, 256, "bfloat16", "test").to_dict(),
        tokens=[2],
        iterations=2,
        warmup=1,
        store_host="127.0.0.1",
        store_port=port,
        store_prefix=prefix,
        result_path=str(tmp_path / f"{prefix}.jsonl"),
        timeout_s=30.0,
        modes=["eager"],
        state_dir=str(state),
        prepare_only=prepare_only,
    )


def test_the_preparation_leaves_what_the_points_of_its_setting_then_load(tmp_path):
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    state = tmp_path / "prepared" / "setting"
    entries = []
    run_trial(_request(tmp_path, port, "prepare", state, prepare_only=True), entries.append)
    assert entries == [{"status": "ok", "message": "prepared now"}]  # nothing timed
    entries.clear()
    run_trial(_request(tmp_path, port, "point", state, prepare_only=False), entries.append)
    (entry,) = entries
    assert entry["status"] == "ok" and entry["impl_detail"] == "found flavour b prepared", json.dumps(entry)[:400]
    del server


def test_each_setting_with_a_preparation_has_a_folder_of_its_own_and_its_failure_refuses_its_points(tmp_path):
    a = SweepPoint("p001", "a", PLUGIN, {"NCCL_PROTO": "LL"}, {"flavour": "a"})
    same = SweepPoint("p002", "a again", PLUGIN, {}, {"flavour": "a"})
    b = SweepPoint("p003", "b", PLUGIN, {}, {"flavour": "b"})
    plain = SweepPoint("p004", "gloo", "gloo", {}, {})
    folders = {
        p.point_id: state_dir(tmp_path, p, "gloo", tmp_path / "points" / p.point_id) for p in (a, same, b, plain)
    }
    assert folders["p001"] == folders["p002"] != folders["p003"]  # per setting (impl and options), env aside
    assert folders["p001"].parent == tmp_path / "prepared" and folders["p004"] == tmp_path / "points" / "p004" / "state"
    assert (
        preparation_of(a, "gloo") == "writes flavour a into its state folder" and preparation_of(plain, "gloo") is None
    )
    failed = {preparation_key(PLUGIN, {"flavour": "a"}): "RuntimeError: out of memory"}
    assert build_refusal(same, "gloo", failed).endswith(
        "(writes flavour a into its state folder): RuntimeError: out of memory"
    )
    assert build_refusal(b, "gloo", failed) is None
