"""What a sweep keeps of a point's NCCL INFO log: the parsed choices for the step's own sizes."""

from pathlib import Path

from commprof.sweep.running.measure import summarize_nccl_log

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
    from commprof.replay.trial import TrialRequest
    from commprof.sweep.running.measure import plan_sizes

    model = load_model("kimi-k2.5")
    request = TrialRequest(
        run_id="r",
        point={},
        model=model.to_dict(),
        tp=8,
        tokens=[4],
        phase="verify",
        dtype="bfloat16",
        iterations=1,
        warmup=0,
        backend="nccl",
        rank=0,
        world_size=8,
        device_index=0,
        store_host="",
        store_port=0,
        store_prefix="",
        result_path="",
        timeout_s=1.0,
    )
    gather = build_step_plan(model, 8, 4).ops[-1]
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
