"""The replay harness on real gloo ranks: a whole Kimi-K2.5 step, verified, timed, and faults caught."""

import pytest

from tests.distributed import run_ranks


def _replay(rank, world_size, impl_path, model, tokens, modes, fused_norm="torch"):
    import torch
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(load_model(model) if isinstance(model, str) else model, world_size, tokens)
    cls = load_impl(impl_path)
    impl = cls({"norm": fused_norm} if "norm" in (cls.option_kinds or {}) else {})
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), ReplayConfig(iterations=2, warmup=1))
    return [replay_mode(replay, mode).to_dict() for mode in modes]


@pytest.mark.processes
def test_whole_step_on_two_gloo_ranks_is_verified_and_timed():
    eager, graph = run_ranks(_replay, 2, ("gloo", "kimi-k2.5", 4, ("eager", "graph")))[0]
    assert eager["status"] == "ok", eager["message"]
    assert eager["check"]["ok"] and eager["check"]["bad_ops"] == 0
    assert eager["timing"] == "cpu_clock"
    assert eager["step_us"]["n"] == 2 and eager["step_us"]["min"] > 0
    assert len(eager["op_us"]["median"]) == 124 and eager["op_us"]["sites"][-1] == "logits"
    assert len(eager["rank_step_median_us"]) == 2
    assert graph["status"] == "unsupported" and "CUDA" in graph["message"]


def _llama(layers: int = 4, hidden: int = 256):
    """Llama-3.1-70B's layout at a size gloo replays in a fraction of a second, and its step's all-reduces at T = 2."""
    from dataclasses import replace

    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan

    full = load_model("llama-3.1-70b")
    # `layers` (each layer's sites) is cut too: else the shape keeps all 80 of the model's layers
    shape = replace(full, num_layers=layers, layers=full.layers[:layers], hidden_size=hidden, vocab_size=1024)
    return shape, sum(op.collective == "all_reduce" for op in build_step_plan(shape, 2, 2).ops)


@pytest.mark.processes
@pytest.mark.parametrize("impl", ["tests.plugins.faulty:WrongOnRank1", "tests.plugins.faulty:SilentNoOp"])
def test_a_wrong_contribution_is_caught_with_op_index(impl):
    shape, all_reduces = _llama()
    results = run_ranks(_replay, 2, (impl, shape, 2, ("eager",)))
    for (eager,) in results:
        assert eager["status"] == "wrong"
        assert eager["check"]["first_bad_op"] == 0 and eager["check"]["first_bad_site"] == "embed"
        assert eager["check"]["bad_ops"] == all_reduces  # every all-reduce; the all-gather stays right
        assert "op 0 (embed)" in eager["message"]


@pytest.mark.processes
def test_unfused_rmsnorm_reference_matches_fp32_on_gloo():
    """Qwen3-235B-A22B's hidden size and dtype (what the norm's error and tolerance depend on), 4 of its 94 layers:
    every layer's all-reduce + norm has the same shape."""
    from dataclasses import replace

    from commprof.planner.models import load_model

    full = load_model("qwen3-235b-a22b")
    shape = replace(full, num_layers=4, layers=full.layers[:4])
    (eager,) = run_ranks(_replay, 2, ("nccl+rmsnorm", shape, 3, ("eager",)))[0]
    assert eager["status"] == "ok", eager["message"]
    assert eager["check"]["max_abs_err"] <= eager["check"]["tolerance"]


@pytest.mark.processes
def test_values_do_not_drift_over_many_steps():
    (eager,) = run_ranks(_replay_many, 2, ())[0]
    assert eager["status"] == "ok"


# In-place all-reduces of 2 ranks that were not refilled would double every value each step: bf16's range (2^128)
# is left within one pass of this many steps.
DRIFT_STEPS = 130


def _replay_many(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(ModelShape("tiny", 1, 64, 128, "bfloat16", "test"), world_size, 2)
    impl = load_impl("gloo")()
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    config = ReplayConfig(iterations=DRIFT_STEPS, warmup=0)
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), config)
    result = replay_mode(replay, "eager")
    # After 2 x DRIFT_STEPS in-place steps (the timed pass and the per-op pass) the buffers still hold finite,
    # fresh-activation-sized values.
    replay.run_ops()
    replay.verify()
    assert all(torch.isfinite(rows.block.float()).all() for rows in replay.tensors.reduce_rows.values())
    return [result.to_dict()]


def test_ranks_agree_on_the_worst_verdict():
    from commprof.replay.agreement import agree_ranks

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


# Small configs of the families, so that gloo replays them in seconds.
TINY_DEEPSEEK = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "num_hidden_layers": 3,
    "hidden_size": 64,
    "vocab_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "first_k_dense_replace": 1,
    "num_nextn_predict_layers": 1,
}
TINY_NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"],
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "vocab_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hybrid_override_pattern": "M*-E",
    "mamba_num_heads": 4,
    "n_groups": 1,  # one group split over the ranks: the gated norm all-reduces
}


def _replay_family(rank, world_size, config, tokens, options, impl_path, impl_options, corrupt=None):
    import torch
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import shape_from_config
    from commprof.planner.plan import PlanOptions, build_step_plan
    from commprof.replay import harness
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    if corrupt is not None:
        name = {"all_gather": "_all_gather_single", "reduce_scatter": "_reduce_scatter_single"}[corrupt]
        real = getattr(harness, name)

        def off_by_one_on_rank_1(out, inp, group=None):
            real(out, inp, group=group)
            if rank == 1:
                out.add_(1)

        setattr(harness, name, off_by_one_on_rank_1)
    plan = build_step_plan(
        shape_from_config(config, "tiny", "test"), world_size, tokens, options=PlanOptions(**options)
    )
    impl = load_impl(impl_path)(impl_options)
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), ReplayConfig(iterations=3, warmup=1))
    return [replay_mode(replay, "eager").to_dict()]


@pytest.mark.processes
@pytest.mark.parametrize(
    "config,tokens,options,impl,impl_options",
    [
        (TINY_DEEPSEEK, 4, {"spec": "mtp", "num_steps": 1, "dp_attention": True}, "gloo", {}),
        (TINY_DEEPSEEK, 6, {"spec": "eagle", "num_steps": 2, "draft_vocab": 96}, "nccl+rmsnorm", {"norm": "torch"}),
        (TINY_NEMOTRON_H, 3, {}, "gloo", {}),
    ],
)
def test_every_collective_kind_replays_and_verifies(config, tokens, options, impl, impl_options):
    (eager,) = run_ranks(_replay_family, 2, (config, tokens, options, impl, impl_options))[0]
    assert eager["status"] == "ok", eager["message"]
    ops = eager["op_us"]
    assert len(ops["median"]) == len(ops["sites"]) == len(ops["collectives"]) == len(ops["draft"])
    if options.get("dp_attention"):
        assert {"all_gather", "reduce_scatter"} <= set(ops["collectives"]) and "all_reduce" not in ops["collectives"]
    if options.get("spec"):
        assert ops["draft"][-1] and ops["sites"][-1].startswith("draft.") and not ops["draft"][0]
    if config is TINY_NEMOTRON_H:
        assert "layer.0.mamba_norm" in ops["sites"]


@pytest.mark.processes
@pytest.mark.parametrize(
    "collective,site", [("reduce_scatter", "layer.0.dp_scatter"), ("all_gather", "layer.0.dp_gather")]
)
def test_a_wrong_gather_or_scatter_is_caught(collective, site):
    options = {"dp_attention": True}
    for (eager,) in run_ranks(_replay_family, 2, (TINY_DEEPSEEK, 2, options, "gloo", {}, collective)):
        assert eager["status"] == "wrong" and eager["check"]["first_bad_site"] == site


@pytest.mark.processes
def test_nan_outputs_are_wrong_and_counted_with_a_finite_error():
    shape, all_reduces = _llama()
    results = run_ranks(_replay, 2, ("tests.plugins.faulty:NaNOnRank0", shape, 2, ("eager",)))
    (eager,) = results[0]
    assert eager["status"] == "wrong"
    assert eager["check"]["non_finite"] == all_reduces  # one per all-reduce
    assert eager["check"]["max_abs_err"] == 0.0  # the finite values are right
    assert f"{all_reduces} non-finite value(s) (NaN/Inf)" in eager["message"]


def test_a_nan_never_hides_in_the_error():
    import torch

    from commprof.replay.replay_tensors import _finite_error

    got = torch.tensor([1.0, float("nan"), float("inf"), 4.5])
    assert _finite_error(got, torch.tensor([1.0, 2.0, 3.0, 4.0])) == (0.5, 2)
    assert _finite_error(torch.full((3,), float("nan")), torch.zeros(3)) == (0.0, 3)


# Planted all-reduces for one 8-rank launch: (implementation, options, what its eager mode records).
PLANTINGS = [
    ("gloo", {}, "ok"),
    ("nccl+rmsnorm", {"norm": "torch"}, "ok"),
    ("tests.plugins.faulty:DropsRank0", {}, "wrong"),
    ("tests.plugins.faulty:DoublesRank1", {}, "wrong"),
    ("tests.plugins.faulty:StaleOutput", {}, "wrong"),
    ("tests.plugins.faulty:IdleOutput", {}, "wrong"),
]


def _replay_plantings(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(ModelShape("tiny", 2, 64, 256, "bfloat16", "test"), world_size, 2)
    results = []
    for impl_path, options, _ in PLANTINGS:
        impl = load_impl(impl_path)(options)
        impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
        # The checked first step, then one timed step (the last, checked again) and the per-op pass's: a stale or
        # idle kernel is right on the first and wrong on the last. Each step costs 8 ranks on 2 cores dearly.
        config = ReplayConfig(iterations=1, warmup=0)
        replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), config)
        results.append(replay_mode(replay, "eager").to_dict())
    return results


@pytest.mark.processes
def test_at_tp8_a_dropped_doubled_stale_or_idle_contribution_is_wrong_and_right_ones_stay_ok():
    """One 8-rank gloo launch: a dropped rank is off by at most 7 per element, inside the tolerance the ranks
    scaled (8 x 2^-8 x 252); stale and idle kernels are right on the first step and caught on the last."""
    for rank_results in run_ranks(_replay_plantings, 8):
        for (impl, _, expected), result in zip(PLANTINGS, rank_results, strict=True):
            assert result["status"] == expected, (impl, result["message"])
            if impl == "gloo":  # an exact sum: not one unit off (the fused reference's norm has a tolerance)
                assert result["check"]["max_abs_err"] == 0.0 and result["check"]["tolerance"] == 0.0
    by_impl = {impl: result for (impl, _, _), result in zip(PLANTINGS, rank_results, strict=True)}
    assert "the last timed step (the first was right)" in by_impl["tests.plugins.faulty:StaleOutput"]["message"]
    assert by_impl["tests.plugins.faulty:IdleOutput"]["check"]["non_finite"] > 0


def _rank_tensors(world: int, fused: bool = False):
    """Every rank's StepTensors of one tiny plan, in this process (CPU)."""
    import torch

    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.replay_tensors import StepTensors

    plan = build_step_plan(ModelShape("tiny", 2, 64, 256, "bfloat16", "test"), world, 2)
    return plan, [StepTensors(plan, r, world, torch.device("cpu"), fused) for r in range(world)]


def _reduce(plan, ranks, drop: int | None = None):
    """Each all-reduce op's exact sum over the ranks' current inputs (rank `drop` left out), as rank 0's outputs."""
    import torch

    first = ranks[0]
    for op in plan.ops:
        if op.collective != "all_reduce":
            continue
        key, row = first.row_of[op.index]
        rows = [t.reduce_rows[key].inputs[row].float() for r, t in enumerate(ranks) if r != drop]
        first.outputs[op.index] = torch.stack(rows).sum(0).to(torch.bfloat16)
    for op in plan.ops:  # the all-gathers, right
        if op.collective == "all_gather":
            key = (op.input_shape, op.dtype)
            gathered = torch.cat([t.gather_in[key].reshape(op.input_shape[0], -1) for t in ranks])
            first.outputs[op.index] = gathered


def test_an_exact_sum_has_zero_tolerance_and_a_dropped_rank_is_wrong_at_tp8():
    plan, ranks = _rank_tensors(8)
    for t in ranks:
        t.refill()
    _reduce(plan, ranks)
    right = ranks[0].verify(1e-6)
    assert right.ok and right.tolerance == 0.0 and right.max_abs_err == 0.0
    _reduce(plan, ranks, drop=0)
    dropped = ranks[0].verify(1e-6)
    assert not dropped.ok and dropped.max_abs_err <= 7  # the old tolerance (8 x 2^-8 x 252 = 7.9) passed it


def test_the_previous_steps_output_is_wrong_at_every_step():
    plan, ranks = _rank_tensors(2)
    shifts = []
    for _ in range(8):
        for t in ranks:
            t.refill()
        _reduce(plan, ranks)  # this step's right outputs ...
        stale = list(ranks[0].outputs)
        for t in ranks:
            t.refill()
        shifts.append(ranks[0].shift)
        ranks[0].outputs = stale  # ... handed back on the next step
        assert not ranks[0].verify(1e-6).ok
    assert all(a != b for a, b in zip(shifts, shifts[1:]))


def test_a_poisoned_output_left_unwritten_is_wrong_with_its_nans_counted():
    plan, ranks = _rank_tensors(2)
    for t in ranks:
        t.refill()
    _reduce(plan, ranks)
    assert ranks[0].verify(1e-6).ok
    ranks[0].poison()
    for t in ranks:
        t.refill()
    check = ranks[0].verify(1e-6)
    assert not check.ok and check.non_finite > 0


def test_beyond_the_exact_range_the_tolerance_grows_with_the_ranks():
    from commprof.replay.replay_tensors import EXACT_INTEGERS

    _, (tensors,) = _rank_tensors(1)
    tensors.world = 16  # (4 + 3) x 136 = 952 > 2^8: bf16 adds round
    assert not tensors.exact("bfloat16") and tensors.exact("float16") and 952 <= EXACT_INTEGERS["float16"]
    tensors.world = 8
    assert tensors.exact("bfloat16") and tensors.exact("bfloat16", rmsnorm=True)
