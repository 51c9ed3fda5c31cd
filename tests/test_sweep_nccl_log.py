"""What a sweep keeps of a point's NCCL INFO log: the parsed choices for the step's own sizes."""

from pathlib import Path

from commprof.sweep.running.nccl_summary import summarize_nccl_log
from tests.trial_requests import trial_request

FIXTURE = Path(__file__).parent / "fixtures" / "nccl_log" / "nccl-2.27-8gpu-pcie.log"


def test_point_log_is_parsed_for_the_steps_sizes(tmp_path):
    log = tmp_path / "nccl-tuning.rank0.log"
    text = FIXTURE.read_text()
    tuning = [line for line in text.splitlines() if " Bytes -> Algo " in line and not line.startswith("#")]
    assert tuning, "fixture has tuning lines"
    # The probe repeats each op's tuning line once per step; a choice is kept once.
    log.write_text(text + "\n" + "\n".join(tuning * 3) + "\n")
    sizes = {int(line.split(": ")[1].split(" Bytes")[0]) for line in tuning}
    summary = summarize_nccl_log(log, {("all_reduce", min(sizes), min(sizes))})
    assert summary["version"].startswith("2.27.3")
    assert summary["choices"] and {c["bytes"] for c in summary["choices"]} == {min(sizes)}
    keys = [(c["coll"], c["bytes"], c["algo"], c["proto"], c["channels"]) for c in summary["choices"]]
    assert len(keys) == len(set(keys))


def test_missing_log_means_no_summary(tmp_path):
    assert summarize_nccl_log(tmp_path / "absent.log", set()) is None


def test_the_logits_all_gather_choice_is_kept(tmp_path):
    """NCCL >= 2.24 logs an all-gather's per-rank input; the plan knows the gathered output too."""
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan
    from commprof.sweep.running.nccl_summary import plan_sizes

    request = _request({}, [4])
    gather = build_step_plan(load_model("kimi-k2.5"), 8, 4).ops[-1]
    per_rank = gather.bytes // 8
    log = tmp_path / "nccl-tuning.rank0.log"
    log.write_text(
        "h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n"
        "h:1:1 [0] NCCL INFO AllReduce: 57344 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}\n"
        f"h:1:1 [0] NCCL INFO AllGather: {per_rank} Bytes -> Algo RING proto LL channel{{Lo..Hi}}={{0..1}}\n"
        "h:1:1 [0] NCCL INFO AllGather: 64 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}\n"
    )
    summary = summarize_nccl_log(log, plan_sizes(request))
    assert [(c["coll"], c["bytes"]) for c in summary["choices"]] == [("AllReduce", 57344), ("AllGather", per_rank)]


def _request(env: dict[str, str], tokens: list[int]):
    """Rank 0 of Kimi-K2.5's verify step on 8 NCCL ranks, the point setting `env`."""
    from commprof.planner.models import load_model

    return trial_request(
        point={"point_id": "p001", "label": "x", "impl": "default", "env": env, "options": {}},
        model=load_model("kimi-k2.5").to_dict(),
        tp=8,
        tokens=tokens,
        phase="verify",
        backend="nccl",
        world_size=8,
    )


def test_a_protocol_nccl_did_not_engage_is_not_engaged_at_that_t_and_never_ok(tmp_path):
    """Asked for LL128: NCCL ran LL at T = 4 (57344 B) and LL128 at T = 16: the T = 4 records are "not_engaged",
    the T = 16 ones stay ok, and the record says which choice showed it."""
    from types import SimpleNamespace

    from commprof.sweep.running.measure import PointOutcome, build_records
    from commprof.sweep.running.nccl_summary import point_nccl

    init = tmp_path / "nccl.rank0.log"
    init.write_text("h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\nh:1:1 [0] NCCL INFO 4 coll channels, 4 p2p\n")
    tuning = tmp_path / "nccl-tuning.rank0.log"
    tuning.write_text(
        "h:1:1 [0] NCCL INFO AllReduce: 57344 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}\n"
        "h:1:1 [0] NCCL INFO AllReduce: 229376 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..3}\n"
    )
    request = _request({"NCCL_PROTO": "LL128", "NCCL_ALGO": "allreduce:ring"}, [4, 16])
    nccl, not_engaged = point_nccl(request, init, tuning)
    by_variable = {e["variable"]: e for e in nccl["engagement"]}
    assert by_variable["NCCL_ALGO"]["engaged"] is True
    proto = by_variable["NCCL_PROTO"]
    assert (
        proto["engaged"] is False
        and proto["tokens_not_engaged"] == [4]
        and "LL for the AllReduce of 57344 B" in proto["why"]
    )
    entries = [{"tokens": t, "mode": m, "status": "ok", "message": None} for t in (4, 16) for m in ("eager", "graph")]
    ctx = SimpleNamespace(run_id="r", backend="nccl", world_size=8)
    records = build_records(ctx, request, PointOutcome("ok", None, entries), nccl, 1.0, not_engaged)
    status = {(r["tokens"], r["mode"]): r["status"] for r in records}
    assert status == {
        (4, "eager"): "not_engaged",
        (4, "graph"): "not_engaged",
        (16, "eager"): "ok",
        (16, "graph"): "ok",
    }
    assert "NCCL_PROTO=LL128 not engaged" in next(r["message"] for r in records if r["tokens"] == 4)


def test_channel_bounds_are_judged_against_the_coll_channels_and_unknown_is_not_judged(tmp_path):
    from commprof.nccl_log.engagement import engagements

    sizes = {4: [("all_reduce", 57344, 57344)]}
    found = engagements({"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "8"}, {"channels": 4, "choices": []}, sizes)
    assert [(e.variable, e.engaged) for e in found] == [("NCCL_MIN_NCHANNELS", False), ("NCCL_MAX_NCHANNELS", True)]
    (unknown,) = engagements({"NCCL_PROTO": "LL"}, {"channels": 4, "choices": []}, sizes)
    assert unknown.engaged is None and "no choice" in unknown.why
    assert engagements({"NCCL_PROTO": "LL"}, None, sizes) == []
