"""The NCCL + CUDA-graph replay of a whole step on GPUs, at two ranks (sharing GPU 0 when there is one GPU):
NCCL's one-rank path enqueues nothing for an in-place sum, so a single rank proves nothing about NCCL.
The smoke's CPU-side logic is tested in tests/test_gpu_smoke.py."""

import pytest

from tests.distributed import run_nccl_ranks


def _nccl_replay(rank, world_size, device):
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(load_model("kimi-k2.5"), world_size, 4)
    impl = load_impl("nccl")()
    impl.setup(dist.group.WORLD, plan, device)
    replay = StepReplay(plan, impl, dist.group.WORLD, device, ReplayConfig(iterations=3, warmup=1))
    return [replay_mode(replay, mode).to_dict() for mode in ("eager", "graph")]


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(600)
def test_nccl_two_ranks_eager_and_graph_replay_verified():
    eager, graph = run_nccl_ranks(_nccl_replay, 2)[0]
    assert eager["status"] == "ok" and eager["timing"] == "cuda_events", eager["message"]
    assert eager["check"]["bad_ops"] == 0 and len(eager["op_us"]["median"]) == 124
    assert graph["status"] == "ok", graph["message"]
    assert graph["step_us"]["median"] > 0 and len(graph["op_us"]["median"]) == 124
    assert graph["op_timing"].startswith("graph mode") and eager["op_timing"].startswith("eager")
