"""GPU paths: the smoke script's inputs checked on CPU; the NCCL + CUDA-graph replay itself where CUDA exists."""

import pytest

from commprof.gpu_smoke import SMOKE_SWEEP, main
from commprof.sweep.config import parse_sweep


def test_smoke_sweep_is_a_valid_sweep_with_every_implementation():
    spec = parse_sweep(SMOKE_SWEEP)
    impls = {p.impl for p in spec.points}
    assert {"default", "nccl+rmsnorm", "flashinfer-pcie-ipc", "flashinfer-fused", "symm-mem"} <= impls
    assert any(p.env.get("NCCL_ALGO") == "allreduce:tree" for p in spec.points)


def test_smoke_without_gpu_says_so(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: `make gpu-smoke` runs the real paths")
    assert main() == 0
    assert "no CUDA GPU" in capsys.readouterr().out


def _nccl_replay(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.harness import ReplayConfig, StepReplay, replay_mode
    from commprof.impls.registry import load_impl
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    group = dist.new_group(backend="nccl")
    plan = build_step_plan(load_model("kimi-k2.5"), world_size, 4)
    impl = load_impl("nccl")()
    impl.setup(group, plan, device)
    replay = StepReplay(plan, impl, group, device, ReplayConfig(iterations=5, warmup=2))
    return [replay_mode(replay, mode).to_dict() for mode in ("eager", "graph")]


@pytest.mark.gpu
def test_nccl_world_one_eager_and_graph_replay_verified():
    from tests.distributed import run_ranks

    eager, graph = run_ranks(_nccl_replay, 1)[0]
    assert eager["status"] == "ok" and eager["timing"] == "cuda_events", eager["message"]
    assert graph["status"] == "ok", graph["message"]
    assert graph["step_us"]["median"] > 0 and graph["op_us"] is None
