"""Points that cannot act on a launch are refused before any worker starts, with the reason, and --dry-run says so."""

from pathlib import Path

from commprof.impls.base import ImplContext
from commprof.sweep import load_sweep
from commprof.sweep.planning.dryrun import StepCost, format_points_table, stage_runnable_points
from commprof.sweep.planning.gate import inert_reason, refusal, refusals
from commprof.sweep.planning.points import SweepPoint

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
CPU = ImplContext(backend="gloo", world_size=2, dtype="bfloat16", tokens=(1, 4), hidden_size=7168)


def point(impl="default", env=None, options=None, point_id="p001"):
    return SweepPoint(point_id, "label", impl, dict(env or {}), dict(options or {}))


def test_nccl_variables_cannot_act_on_gloo_and_say_so():
    assert inert_reason({"NCCL_ALGO": "ring"}, "gloo") == (
        "NCCL_ALGO has no effect on the gloo backend (NCCL does not run here)"
    )
    assert "NCCL_MAX_NCHANNELS and NCCL_MIN_NCHANNELS have no effect" in inert_reason(
        {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4", "OMP_NUM_THREADS": "2"}, "gloo"
    )
    assert inert_reason({"OMP_NUM_THREADS": "2"}, "gloo") is None
    assert inert_reason({"NCCL_ALGO": "ring"}, "nccl") is None


def test_the_implementations_own_reason_comes_first_and_the_baseline_runs():
    assert refusal(point(), "gloo", CPU) is None
    assert "needs the NCCL backend" in refusal(point("nccl", {"NCCL_PROTO": "LL"}), "gloo", CPU)
    assert refusal(point("flashinfer-fused", options={"use_oneshot": True}), "gloo", CPU)
    # On NCCL the workers gate implementations with their GPUs' facts: the controller only judges variables.
    assert refusal(point("flashinfer-fused", options={"use_oneshot": True}), "nccl", None) is None


def test_pcie8_on_gloo_runs_only_its_baseline_and_reference_and_the_dry_run_shows_it_first():
    spec = load_sweep(SWEEPS / "pcie8-verify.toml")
    refused = refusals(spec.points, "gloo", CPU)
    reference = next(p.point_id for p in spec.points if p.impl == "nccl+rmsnorm")  # torch collectives: runs on gloo
    assert set(refused) == {p.point_id for p in spec.points} - {"p000", reference}
    text = format_points_table(
        spec, StepCost(0.5, {1: 100.0, 4: 120.0, 8: 140.0, 16: 180.0}, "probe"), refused, "gloo", 2
    )
    head = text[: text.index("# id")]
    assert "this launch: gloo backend, 2 ranks: 2 of 33 stage-0 points will run" in head
    assert "31 will be recorded unsupported, never timed" in head
    assert "\nx p001" in text and "\n  p000" in text
    # The channels stage sets NCCL variables in every combination but the all-default one, which is each
    # candidate itself: on gloo it adds nothing. The confirm stage re-measures its candidates: they run again.
    channels, confirm, crossover = spec.stages
    assert stage_runnable_points(channels, "gloo") == 0
    assert stage_runnable_points(channels, "nccl") == channels.max_points()
    assert stage_runnable_points(confirm, "gloo") == confirm.max_points()
    assert "2 points will run in stage 0" in text and "; probe" in text
    assert "up to 60 points, none of which can run on gloo" in text
    assert stage_runnable_points(crossover, "gloo") == 0
    assert "none can run on gloo (graph mode only, and CUDA graphs need GPUs)" in text
