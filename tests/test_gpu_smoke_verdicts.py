"""The smoke's verdicts from records on CPU: a knob passes only where NCCL's logged choice moved from the
baseline's at the same size, shared-GPU step times are labelled time-sliced, and pytest's verdict is read from
its own summary line."""

import pytest

from commprof.gpu_smoke import extended
from commprof.gpu_smoke.knobs import Knob, baseline_choice, knob_verdict, pick_knobs
from commprof.gpu_smoke.points import POINTS, Placement, knob_point, sweep_verdicts
from commprof.gpu_smoke.verdicts import (
    FAIL,
    NOT_SHOWN,
    PASS,
    SKIP,
    TIME_SLICED,
    doctor_verdict,
    exit_code,
    floor_verdict,
    format_verdicts,
    pytest_summary,
    pytest_verdict,
)
from commprof.records.run_meta import RunMeta, parse_meta
from tests.gpu_smoke_records import (
    BASELINE,
    VOCAB_BYTES,
    healthy_records,
    knob_nccl,
    knob_records,
    nccl_summary,
    point_rows,
    record,
)

SHARED, EIGHT = Placement(2, 1), Placement(8, 8)


def by_path(verdicts):
    return {v.path: v for v in verdicts}


def test_a_healthy_box_passes_every_path_and_skips_what_is_not_installed(tmp_path):
    verdicts = sweep_verdicts(healthy_records(tmp_path), POINTS, SHARED, baseline=True)
    statuses = {v.path: v.status for v in verdicts}
    assert [s for p, s in statuses.items() if p.startswith("flashinfer")] == [SKIP, SKIP]
    assert all(s == PASS for p, s in statuses.items() if not p.startswith("flashinfer")), format_verdicts(verdicts)
    log = by_path(verdicts)["NCCL INFO log parsed: version, channels, a choice per all-reduce size"]
    assert "NCCL 2.28.3+cuda13.0" in log.detail and "AllReduce 57344 B -> RING/LL 2 ch" in log.detail
    assert f"AllGather {VOCAB_BYTES} B -> RING/SIMPLE 2 ch" in log.detail
    skipped = by_path(verdicts)["flashinfer-pcie-ipc, eager + graph (2 ranks sharing one GPU)"]
    assert "pip install 'commprof[flashinfer]'" in skipped.detail
    assert exit_code(verdicts) == 0


def test_step_times_of_ranks_sharing_a_gpu_are_labelled_time_sliced(tmp_path):
    shared = by_path(sweep_verdicts(healthy_records(tmp_path), POINTS, SHARED, baseline=True))
    eager = shared["NCCL all-reduce + all-gather, whole step, eager (2 ranks sharing one GPU)"]
    assert eager.detail == f"eager ok, verified: T=4 812 µs {TIME_SLICED}"
    assert TIME_SLICED in shared["nccl+rmsnorm, the unfused reference (2 ranks sharing one GPU)"].detail
    own = by_path(sweep_verdicts(healthy_records(tmp_path), POINTS, EIGHT, baseline=True))
    assert own["NCCL all-reduce + all-gather, whole step, eager (8 ranks on 8 GPUs)"].detail.endswith("812 µs")


def test_a_one_rank_log_has_no_choices_and_fails_the_nccl_verdicts(tmp_path):
    one_rank = nccl_summary(tmp_path, tuning=False)
    rows = [record("defaults", "p000", m, nccl=one_rank) for m in ("eager", "graph")]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"defaults": rows}), POINTS, SHARED, baseline=True))
    log = verdicts["NCCL INFO log parsed: version, channels, a choice per all-reduce size"]
    assert log.status == FAIL and "no TUNING choice for all-reduce size(s) [57344]" in log.detail


def test_the_baseline_must_run_where_an_implementation_may_be_gated(tmp_path):
    gated = [record("defaults", "p000", m, "unsupported", message="needs the NCCL backend") for m in ("eager", "graph")]
    verdicts = sweep_verdicts(healthy_records(tmp_path, {"defaults": gated}), POINTS, SHARED, baseline=True)
    assert verdicts[0].status == FAIL and exit_code(verdicts) == 1


# --- knobs: picked against the baseline's choice, judged against it --------------------------------------


def test_knobs_are_picked_to_differ_from_what_nccl_chose_at_the_baseline(tmp_path):
    baseline = point_rows("defaults", 0, nccl_summary(tmp_path, "RING", "LL", 2))
    assert baseline_choice(baseline) == ("RING", "LL", 2)
    assert pick_knobs(baseline) == (Knob(algo="TREE", proto="SIMPLE"), Knob(channels=4))
    tree = point_rows("defaults", 0, nccl_summary(tmp_path, "TREE", "SIMPLE", 4))
    assert pick_knobs(tree) == (Knob(algo="RING", proto="LL"), Knob(channels=8))
    assert pick_knobs([]) == (Knob(algo="TREE", proto="SIMPLE"), Knob(channels=4))  # no log: the verdict decides
    many = point_rows("defaults", 0, nccl_summary(tmp_path, "RING", "LL", 24))
    assert pick_knobs(many)[1] == Knob(channels=12)  # twice 24 would pass NCCL's cap
    assert [knob_point(k).table for k in pick_knobs(baseline)] == [
        {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple"},
        {"channels": 4},
    ]


def test_a_knob_whose_choice_moved_from_the_baselines_passes(tmp_path):
    knobs = pick_knobs(point_rows("defaults", 0, nccl_summary(tmp_path, *BASELINE)))
    verdicts = sweep_verdicts(knob_records(tmp_path, knobs), tuple(map(knob_point, knobs)), SHARED, baseline=False)
    shown = by_path(verdicts)
    algo = shown["NCCL_ALGO=allreduce:tree NCCL_PROTO=SIMPLE acts (NCCL's log differs from the baseline's)"]
    assert algo.status == PASS and algo.detail.startswith("57344 B RING/LL (baseline) -> 57344 B TREE/SIMPLE")
    channels = shown["NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS=4 acts (NCCL's log differs from the baseline's)"]
    assert channels.status == PASS and channels.detail.startswith("coll channels 2 (baseline) -> 4")
    assert all(v.status == PASS for v in verdicts), format_verdicts(verdicts)


def test_a_knob_nccl_already_chose_is_not_shown(tmp_path):
    """At 2 ranks over sockets NCCL already runs 2 channels: asking for 2 proves nothing."""
    baseline = point_rows("defaults", 0, nccl_summary(tmp_path, *BASELINE))
    for knob, why in [
        (Knob(channels=2), "not shown: NCCL already ran 2 coll channels without it"),
        (Knob(algo="RING", proto="LL"), "not shown: NCCL chose 57344 B RING/LL without it too"),
    ]:
        verdict = knob_verdict("k", knob, point_rows(knob.label, 1, knob_nccl(tmp_path, knob)), baseline)
        assert verdict.status == NOT_SHOWN and verdict.detail.startswith(why), verdict
        assert exit_code([verdict]) == 0 and "[NOT SHOWN]" in format_verdicts([verdict])


def test_a_knob_is_shown_where_the_baseline_differs_at_one_size_of_two(tmp_path):
    tokens = (4, 16)
    base_nccl = nccl_summary(tmp_path, "RING", "LL", tokens=tokens)
    base_nccl["choices"] = [  # NCCL switched to Simple at the larger size on its own
        {**c, "proto": "SIMPLE"} if c["bytes"] == 16 * 7168 * 2 else c for c in base_nccl["choices"]
    ]
    knob = Knob(algo="RING", proto="SIMPLE")
    rows = point_rows(knob.label, 1, knob_nccl(tmp_path, knob, tokens), tokens)
    verdict = knob_verdict("k", knob, rows, point_rows("defaults", 0, base_nccl, tokens))
    assert verdict.status == PASS and verdict.detail.startswith("57344 B RING/LL (baseline) -> 57344 B RING/SIMPLE")
    assert "229376 B" not in verdict.detail


def test_a_knob_nccl_did_not_follow_fails_and_an_unlogged_baseline_is_not_shown(tmp_path):
    knob = Knob(algo="TREE", proto="SIMPLE")
    baseline = point_rows("defaults", 0, nccl_summary(tmp_path, *BASELINE))
    ignored = point_rows(knob.label, 1, nccl_summary(tmp_path, "RING", "SIMPLE"))
    verdict = knob_verdict("k", knob, ignored, baseline)
    assert verdict.status == FAIL and "did not follow it: 57344 B RING/SIMPLE" in verdict.detail
    silent = point_rows("defaults", 0, nccl_summary(tmp_path, tuning=False))
    verdict = knob_verdict("k", knob, point_rows(knob.label, 1, knob_nccl(tmp_path, knob)), silent)
    assert verdict.status == NOT_SHOWN and "the baseline logged no choice at [57344] B" in verdict.detail
    four = Knob(channels=4)
    verdict = knob_verdict("k", four, point_rows(four.label, 1, nccl_summary(tmp_path, channels=2)), baseline)
    assert verdict.status == FAIL and "init log shows 2 coll channels" in verdict.detail


def test_a_failed_capture_under_a_knob_is_a_verdict_but_a_crash_is_not(tmp_path):
    knob = Knob(algo="TREE", proto="SIMPLE")
    nccl = knob_nccl(tmp_path, knob)
    failed = point_rows(knob.label, 1, nccl, statuses=("ok", "capture_failed"))
    failed[1]["message"] = "RuntimeError: operation not permitted when stream is capturing"
    verdicts = by_path(
        sweep_verdicts(knob_records(tmp_path, [knob], {knob.label: failed}), (knob_point(knob),), SHARED, False)
    )
    capture = verdicts[f"capture verdict under {knob.setting}"]
    assert capture.status == PASS and "T=4 capture_failed (RuntimeError: operation not permitted" in capture.detail
    crashed = point_rows(knob.label, 1, None, statuses=("crashed", "crashed"))
    verdicts = by_path(
        sweep_verdicts(knob_records(tmp_path, [knob], {knob.label: crashed}), (knob_point(knob),), SHARED, False)
    )
    assert verdicts[f"capture verdict under {knob.setting}"].status == FAIL
    assert verdicts[f"{knob.setting} acts (NCCL's log differs from the baseline's)"].status == FAIL


# --- pytest's own summary line -----------------------------------------------------------------------------


def test_pytest_verdict_reads_pytests_summary_line_and_ignores_stderr():
    stdout = "..s.\n3 passed, 1 skipped, 590 deselected in 2.10s\n"
    stderr = "UserWarning: TypedStorage is deprecated\nNCCL WARN something on rank 1\n"
    verdict = pytest_verdict("p", 0, stdout, stdout + stderr)  # stderr after stdout, as the step joins them
    assert verdict.status == PASS and verdict.detail == "3 passed, 1 skipped, 590 deselected in 2.10s"
    framed = "===== 12 passed, 3 skipped in 61.20s (0:01:01) =====\n"
    assert pytest_summary(framed) == ("12 passed, 3 skipped in 61.20s (0:01:01)", {"passed": 12, "skipped": 3})
    failed = pytest_verdict("p", 1, "F.\nFAILED tests/test_x.py::test_y - AssertionError\n1 failed, 1 passed in 3.0s\n")
    assert (
        failed.status == FAIL
        and failed.detail == "exit 1: 1 failed, 1 passed in 3.0s\nFAILED tests/test_x.py::test_y - AssertionError"
    )
    assert (
        pytest_verdict("p", 5, "590 deselected in 1.0s\n").detail == "no GPU test was collected: 590 deselected in 1.0s"
    )
    skipped = pytest_verdict("p", 0, "sssss\n15 skipped, 578 deselected in 14.41s\n")
    assert skipped.status == FAIL and skipped.detail.startswith("no GPU test ran: 15 skipped")
    lost = pytest_verdict("p", None, "", "(killed after 90 s)")
    assert lost.status == FAIL and "no pytest summary line" in lost.detail and "killed" in lost.detail


def test_doctor_verdict_needs_a_loaded_link_reading_and_the_nccl_probe():
    loaded = {
        "status": "fail",
        "counts": {"ok": 9, "fail": 1},
        "checks": [
            {"id": "pcie-link", "status": "ok", "detail": "", "evidence": ["GPU 0: Gen5 x16 under load (NVML)"]},
            {"id": "nccl", "status": "ok", "detail": "", "evidence": []},
        ],
    }
    assert doctor_verdict("d", 1, loaded, "").status == PASS  # a failing box check is not the smoke's failure
    idle = {**loaded, "checks": [{**loaded["checks"][0], "evidence": ["GPU 0: Gen1 x16 idle"]}, loaded["checks"][1]]}
    assert "no PCIe link reading under load" in doctor_verdict("d", 0, idle, "").detail
    assert doctor_verdict("d", 2, None, "Traceback ...").status == FAIL


def test_floor_verdict_needs_measured_figures_and_a_recorded_source():
    good = {"figures": {"pair_write_gbps": 53.0, "all_pairs_gbps": 22.0}, "floor": []}
    meta = parse_meta({"floor": {"figures": {"source": "measured at the start of this run"}}})
    assert floor_verdict("f", 2, 0, good, "", meta).status == PASS
    assert floor_verdict("f", 2, 2, None, "needs at least 2 CUDA GPUs", meta).status == FAIL
    assert floor_verdict("f", 2, 0, {"figures": {"pair_write_gbps": 0}}, "", meta).status == FAIL
    assert "no floor entry" in floor_verdict("f", 2, 0, good, "", RunMeta()).detail
    assert floor_verdict("f", 1, None, None, "", None).detail.startswith("skipped: one GPU")


# --- the second step's verdicts ----------------------------------------------------------------------------


def test_several_graphs_on_one_communicator_need_every_t_of_the_baseline(tmp_path):
    tokens = tuple(extended.TOKENS)
    records = knob_records(tmp_path, extended.KNOBS, tokens=tokens)
    verdict = extended.graphs_verdict("g", records)
    assert verdict.status == PASS and verdict.detail.startswith("3 graphs of 124 collectives each (T=1, 4, 8)")
    assert "tree/LL T=8 ok" in verdict.detail
    broken = [r for r in records if not (r["point_id"] == "p000" and r["tokens"] == 8 and r["mode"] == "graph")]
    broken.append(record("defaults", "p000", "graph", "capture_failed", tokens=8, message="RuntimeError: capture"))
    verdict = extended.graphs_verdict("g", broken)
    assert verdict.status == FAIL and "2 of 3 ok; T=8 capture_failed: RuntimeError: capture" in verdict.detail


def test_trace_and_floor_refusal_verdicts():
    import json

    account = {
        "plan_match": True,
        "plan": {"model": "Kimi-K2.5", "tp": 2, "tokens": 4, "ops": 124},
        "steps": {"alike": 3},
    }
    assert extended.trace_verdict("t", 0, json.dumps(account), "").detail == (
        "plan Kimi-K2.5 TP 2 T=4 (124 ops): plan_match true over 3 alike steps"
    )
    differs = {**account, "plan_match": False, "differences": [{"what": "order", "plan": "op 3", "trace": "op 4"}]}
    assert (
        "plan_match false: order: plan op 3, trace op 4"
        in extended.trace_verdict("t", 0, json.dumps(differs), "").detail
    )
    assert extended.trace_verdict("t", 2, "", "commprof: error: no trace").status == FAIL
    refusal = "commprof floor: error: the floor probe needs at least 2 CUDA GPUs in this process, found 1; without ..."
    assert extended.floor_refusal_verdict("f", 2, refusal + "\n").status == PASS
    assert extended.floor_refusal_verdict("f", 1, "Traceback (most recent call last):\n  ...\n").status == FAIL


@pytest.mark.processes
def test_the_real_floor_refusal_without_two_gpus_is_judged_a_pass():
    import subprocess
    import sys

    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has 2 GPUs: the floor probe runs instead of refusing")
    proc = subprocess.run(
        [sys.executable, "-m", "commprof", "floor", "--quick", "--json"], capture_output=True, text=True
    )
    verdict = extended.floor_refusal_verdict("f", proc.returncode, proc.stdout + proc.stderr)
    assert verdict.status == PASS and "needs at least 2 CUDA GPUs" in verdict.detail


def test_a_knob_nccl_did_not_engage_still_has_its_capture_verdict():
    """A not_engaged record replaces only an ok one (captured, replayed, verified): the capture verdict stands."""
    from commprof.gpu_smoke.verdicts import PASS as V_PASS
    from commprof.gpu_smoke.verdicts import capture_verdict

    rows = [
        {"mode": "graph", "tokens": 4, "status": "not_engaged", "message": "NCCL_PROTO=LL not engaged: ..."},
        {"mode": "graph", "tokens": 16, "status": "ok", "message": None},
    ]
    verdict = capture_verdict("capture verdict under NCCL_PROTO=LL", rows)
    assert verdict.status == V_PASS and "T=4 not_engaged (NCCL_PROTO=LL not engaged" in verdict.detail
