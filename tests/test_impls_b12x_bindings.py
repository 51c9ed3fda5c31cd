"""Every call commprof makes into b12x, bound against the installed package's signatures; the whole module is
skipped, with the reason, only where b12x is not installed (pip install 'commprof[b12x]')."""

import inspect

import pytest
import torch

from commprof.impls import b12x as b

pcie = pytest.importorskip("b12x.comm.pcie", reason="b12x is not installed (pip install 'commprof[b12x]')")
preparation = pytest.importorskip("b12x.preparation")


def bind(fn, *args, **kwargs):
    return inspect.signature(fn).bind(*args, **kwargs)


def test_runtime_constructors_bind():
    group, device = object(), torch.device("cuda", 0)
    bind(pcie.OneshotAllReduce.from_exchange_group, **b.oneshot_kwargs(group, device, 1 << 20))
    bind(pcie.PCIeTwoShotBF16.from_exchange_group, **b.twoshot_kwargs(group, device, 16, 7168))
    bind(pcie.DmaAllReduce.__init__, object(), **b.dma_kwargs(group, device, 1 << 20))
    bind(preparation.PreparationSession.__init__, object(), **b.session_kwargs(device))


def test_planning_and_preparation_bind():
    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    for surface in b.SURFACES.values():
        bind(pcie.query_from_runtime, object(), surface=surface, call={"inp": x})
    bind(pcie.plan, object(), runtime=object())
    bind(preparation.Plan.request, object(), name="n", prepare_call=lambda s: None, collective=None)
    bind(preparation.PreparationSession.prepare, object(), [], coordinator=lambda p: None)
    preparation.CollectiveRequirement(key="commprof.b12x.oneshot.4x64", ranks=(0, 1))
    bind(preparation.PreparedCall, run=lambda: None, output=x)
    fields = preparation.PreparationProgress.__dataclass_fields__
    assert {"ready_collectives", "ready_tuning", "ready_cache"} <= set(fields)
    bind(preparation.PreparationSession.close, object())


def test_the_calls_commprof_makes_per_op_bind():
    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    bind(pcie.OneshotAllReduce.all_reduce, object(), x, plan=object(), out=x)
    bind(
        pcie.OneshotAllReduce.all_reduce_fused_add_rms_norm,
        object(),
        **b.fused_call_kwargs(x, x, x[0], 1e-6, object(), x, x),
    )
    bind(pcie.PCIeTwoShotBF16.all_reduce, object(), x, x, plan=object())
    bind(pcie.PCIeTwoShotBF16.capture, object(), plan=object())
    bind(pcie.DmaAllReduce.all_reduce, object(), x, plan=object(), out=x)
    for cls in (pcie.OneshotAllReduce, pcie.PCIeTwoShotBF16, pcie.DmaAllReduce):
        bind(cls.close, object())


def test_the_priming_calls_bind_against_the_prepared_states():
    from b12x.comm.pcie import _dma_preparation, _oneshot_preparation, _twoshot_preparation

    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    oneshot = _oneshot_preparation._OneshotExecutionState
    bind(oneshot.bind_input, object(), x)
    bind(oneshot.run_plain, object(), x, x)
    bind(oneshot.run_fused, object(), x, x, x[0], x, x, 1e-6)
    bind(_twoshot_preparation._TwoShotExecutionState.run, object(), x, None, x, threads=512, block_limit=64)
    bind(_dma_preparation._DmaExecutionState.prime, object(), x, out=x)
    bind(_dma_preparation._DmaExecutionState.run, object(), x, out=x)


def test_commprofs_limits_match_b12xs_own():
    from b12x.comm.pcie import _tuning, pcie_dma, pcie_oneshot, pcie_twoshot_bf16

    assert b.ONESHOT_WORLD_SIZES == pcie_oneshot.SUPPORTED_WORLD_SIZES == _tuning.SURFACES[b.SURFACES["oneshot"]]
    assert b.TWOSHOT_WORLD_SIZES == pcie_twoshot_bf16.SUPPORTED_WORLD_SIZES == _tuning.SURFACES[b.SURFACES["twoshot"]]
    assert b.DMA_WORLD_SIZES == pcie_dma.SUPPORTED_WORLD_SIZES == _tuning.SURFACES[b.SURFACES["dma"]]
    assert _tuning.SURFACES[b.SURFACES["fused"]] == b.ONESHOT_WORLD_SIZES
    assert {str(d).removeprefix("torch.") for d in pcie_oneshot.SUPPORTED_DTYPES} == set(b.ONESHOT_DTYPES)


@pytest.mark.gpu
@pytest.mark.skipif(
    torch.cuda.device_count() < 2 or torch.cuda.get_device_capability(0)[0] != 12,
    reason="needs at least 2 SM12x GPUs (b12x runs on consumer Blackwell only)",
)
@pytest.mark.parametrize("name", ["b12x", "b12x-fused"])
def test_b12x_runs_verified_on_two_gpus(name):
    from commprof.harness import ReplayConfig, StepReplay, replay_mode
    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from tests.distributed import run_nccl_ranks

    def body(rank, world_size, device):
        import torch.distributed as dist

        plan = build_step_plan(ModelShape("tiny", 2, 1024, 256, "bfloat16", "test"), world_size, 4)
        impl = load_impl(name)({})
        impl.setup(dist.group.WORLD, plan, device)
        try:
            impl.prepare([(4, 1024)])
            replay = StepReplay(plan, impl, dist.group.WORLD, device, ReplayConfig(iterations=3, warmup=1))
            return [replay_mode(replay, mode).status for mode in ("eager", "graph")], impl.detail()
        finally:
            impl.teardown()

    for statuses, detail in run_nccl_ranks(body, world_size=2):
        assert statuses == ["ok", "ok"] and "b12x.comm.pcie" in detail
