"""The device-aligned start on real GPUs.

At two NCCL ranks (sharing GPU 0 when there is one GPU), a host stall between the aligning all-reduce and the
start event, shorter than the spin, must not reach the step (a host-synchronized start would add all of it).
At one rank (no GPU sharing to blur it), a graph step sampled alone must agree with nccl-tests' way of timing:
a batch of back-to-back replays between two events, divided by the count.
"""

import time

import pytest

from tests.distributed import run_nccl_ranks

STALL_S = 0.1


def _tiny_replay(world_size, device, start_delay_us, impl_name="nccl", options=None):
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay

    plan = build_step_plan(ModelShape("tiny", 2, 1024, 4096, "bfloat16", "test"), world_size, 4)
    impl = load_impl(impl_name)(options or {})
    impl.setup(dist.group.WORLD, plan, device)
    config = ReplayConfig(iterations=6, warmup=2, start_delay_us=start_delay_us)
    return StepReplay(plan, impl, dist.group.WORLD, device, config)


def _stalled(rank, world_size, device):
    from commprof.replay.harness import replay_mode

    replay = _tiny_replay(world_size, device, start_delay_us=2 * STALL_S * 1e6)
    align = replay.clock.align

    def late_align():
        align()
        if rank == 1:
            time.sleep(STALL_S)  # the host is late after enqueuing the barrier, inside the device's spin

    replay.clock.align = late_align
    return replay_mode(replay, "eager").to_dict()


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(600)
def test_a_host_stall_inside_the_spin_does_not_reach_the_step():
    result = run_nccl_ranks(_stalled, 2)[0]
    assert result["status"] == "ok" and result["timing"] == "cuda_events", result["message"]
    assert result["step_us"]["median"] < STALL_S * 1e6 / 2, result["step_us"]


def _sample_vs_batch(rank, world_size, device, batch):
    import torch

    from commprof.replay.harness import replay_mode

    # The torch-ops norm gives the graph real kernels at one rank, where NCCL's in-place sum enqueues none.
    replay = _tiny_replay(world_size, device, start_delay_us=50.0, impl_name="nccl+rmsnorm", options={"norm": "torch"})
    replay_mode(replay, "eager")  # as the trial does: eager first, then capture
    graph = replay_mode(replay, "graph").to_dict()
    # nccl-tests' way: `batch` replays back to back between two events, the mean per replay.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    replay.refill()
    torch.cuda.synchronize()
    start.record()
    for _ in range(batch):
        replay.graph.replay()
    end.record()
    end.synchronize()
    return graph, start.elapsed_time(end) * 1000.0 / batch


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(600)
def test_a_graph_step_sampled_alone_agrees_with_a_batch_of_replays():
    graph, batch_mean_us = run_nccl_ranks(_sample_vs_batch, 1, (20,))[0]
    assert graph["status"] == "ok", graph["message"]
    median = graph["step_us"]["median"]
    assert abs(median - batch_mean_us) <= 0.25 * batch_mean_us + 20, (median, batch_mean_us)
