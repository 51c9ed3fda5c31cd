"""The replay harness on real gloo ranks: a whole Kimi-K2.5 step, verified, timed, and faults caught."""

import pytest

from tests.distributed import run_ranks


def _replay(rank, world_size, impl_path, model, tokens, modes, fused_norm="torch"):
    import torch
    import torch.distributed as dist

    from commprof.harness import ReplayConfig, StepReplay, replay_mode
    from commprof.impls.registry import load_impl
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan

    plan = build_step_plan(load_model(model), world_size, tokens)
    cls = load_impl(impl_path)
    impl = cls({"norm": fused_norm} if "norm" in (cls.option_kinds or {}) else {})
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), ReplayConfig(iterations=4, warmup=1))
    return [replay_mode(replay, mode).to_dict() for mode in modes]


@pytest.mark.slow
def test_whole_step_on_two_gloo_ranks_is_verified_and_timed():
    eager, graph = run_ranks(_replay, 2, ("gloo", "kimi-k2.5", 4, ("eager", "graph")))[0]
    assert eager["status"] == "ok", eager["message"]
    assert eager["check"]["ok"] and eager["check"]["bad_ops"] == 0
    assert eager["timing"] == "cpu_clock"
    assert eager["step_us"]["n"] == 4 and eager["step_us"]["min"] > 0
    assert len(eager["op_us"]["median"]) == 124 and eager["op_us"]["sites"][-1] == "logits"
    assert len(eager["rank_step_median_us"]) == 2
    assert graph["status"] == "unsupported" and "CUDA" in graph["message"]


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["tests.plugins.faulty:WrongOnRank1", "tests.plugins.faulty:SilentNoOp"])
def test_a_wrong_contribution_is_caught_with_op_index(impl):
    results = run_ranks(_replay, 2, (impl, "llama-3.1-70b", 2, ("eager",)))
    for (eager,) in results:
        assert eager["status"] == "wrong"
        assert eager["check"]["first_bad_op"] == 0 and eager["check"]["first_bad_site"] == "embed"
        assert eager["check"]["bad_ops"] == 161  # every all-reduce; the all-gather stays right
        assert "op 0 (embed)" in eager["message"]


@pytest.mark.slow
def test_unfused_rmsnorm_reference_matches_fp32_on_gloo():
    (eager,) = run_ranks(_replay, 2, ("nccl+rmsnorm", "qwen3-235b-a22b", 3, ("eager",)))[0]
    assert eager["status"] == "ok", eager["message"]
    assert eager["check"]["max_abs_err"] <= eager["check"]["tolerance"]


@pytest.mark.slow
def test_values_do_not_drift_over_many_steps():
    (eager,) = run_ranks(_replay_many, 2, ())[0]
    assert eager["status"] == "ok"


def _replay_many(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.harness import ReplayConfig, StepReplay, replay_mode
    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan

    plan = build_step_plan(ModelShape("tiny", 4, 64, 128, "bfloat16", "test"), world_size, 2)
    impl = load_impl("gloo")()
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), ReplayConfig(iterations=300, warmup=0))
    result = replay_mode(replay, "eager")
    # After 300 in-place steps the buffers still hold finite, fresh-activation-sized values.
    replay.run_ops()
    replay.verify()
    assert torch.isfinite(replay.block.float()).all()
    return [result.to_dict()]


def test_ranks_agree_on_the_worst_verdict():
    from commprof.harness import agree_ranks

    good = {
        "ok": True,
        "max_abs_err": 0.0,
        "tolerance": 1.0,
        "bad_ops": 0,
        "first_bad_op": None,
        "first_bad_site": None,
    }
    bad = {
        "ok": False,
        "max_abs_err": 3.0,
        "tolerance": 1.0,
        "bad_ops": 5,
        "first_bad_op": 7,
        "first_bad_site": "layer.3.attn",
    }
    status, _, check = agree_ranks(
        [{"status": "ok", "message": None, "check": good}, {"status": "ok", "message": None, "check": bad}]
    )
    assert status == "ok" and not check.ok and check.bad_ranks == (1,) and check.first_bad_op == 7
    assert "rank(s) 1" in check.describe()
    status, message, check = agree_ranks(
        [
            {"status": "ok", "message": None, "check": good},
            {"status": "capture_failed", "message": "boom", "check": None},
        ]
    )
    assert (status, message, check) == ("capture_failed", "rank 1: boom", None)


@pytest.mark.slow
def test_nan_outputs_are_wrong_and_counted_with_a_finite_error():
    results = run_ranks(_replay, 2, ("tests.plugins.faulty:NaNOnRank0", "llama-3.1-70b", 2, ("eager",)))
    (eager,) = results[0]
    assert eager["status"] == "wrong"
    assert eager["check"]["non_finite"] == 161  # one per all-reduce
    assert eager["check"]["max_abs_err"] == 0.0  # the finite values are right
    assert "161 non-finite value(s) (NaN/Inf)" in eager["message"]


def test_a_nan_never_hides_in_the_error():
    import torch

    from commprof.harness import _finite_error

    got = torch.tensor([1.0, float("nan"), float("inf"), 4.5])
    assert _finite_error(got, torch.tensor([1.0, 2.0, 3.0, 4.0])) == (0.5, 2)
    assert _finite_error(torch.full((3,), float("nan")), torch.zeros(3)) == (0.0, 3)
