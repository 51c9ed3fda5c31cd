"""Does the harness add to what it measures? commprof's median step vs a bare loop of the same calls.

Two gloo ranks, the Kimi-K2.5 verify plan at TP 2, the same tensors. One step of the harness's own timed loop
and one bare step alternate in ABBA order, so machine noise and position effects (on a 2-core VM the step
right after other Python work runs slower, whichever it is) hit both alike. Prints both medians and their
ratio (target <= 1.03).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 90
TOKENS = 4


def _measure(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, _all_gather_single, replay_mode

    # As under torchrun (OMP_NUM_THREADS=1), which is how sweep workers run: idle OpenMP threads of one rank
    # spinning after a parallel copy would otherwise steal the other rank's core on a 2-core machine.
    torch.set_num_threads(1)
    plan = build_step_plan(load_model("kimi-k2.5"), world_size, TOKENS)
    impl = load_impl("gloo")()
    group = dist.group.WORLD
    impl.setup(group, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, group, torch.device("cpu"), ReplayConfig(iterations=10, warmup=2))
    ops = [(op.collective, replay.tensors.buffers(op)) for op in plan.ops]

    def bare_steps(count: int) -> list[float]:
        samples = []
        for _ in range(count):
            replay.refill()
            dist.barrier(group=group)
            start = time.perf_counter_ns()
            for collective, tensors in ops:
                if collective == "all_reduce":
                    dist.all_reduce(tensors[0], group=group)
                else:
                    _all_gather_single(*tensors, group=group)
            samples.append((time.perf_counter_ns() - start) / 1000.0)
        return samples

    # Alternate single steps (the harness's own timed loop, one step, vs one bare step) so that drift in the
    # machine's load hits both alike; then one whole replay_mode pass proves the same loop verifies ok.
    result = replay_mode(replay, "eager")
    assert result.status == "ok", result.message
    one_step = ReplayConfig(iterations=1, warmup=0)
    replay.config = one_step
    harness_local, bare_local = [], []
    for i in range(STEPS):
        # ABBA order: on a 2-core VM the step right after other Python work runs slower, whichever it is.
        if i % 2 == 0:
            harness_local += replay.time_steps(graph=False)[0]
            bare_local += bare_steps(1)
        else:
            bare_local += bare_steps(1)
            harness_local += replay.time_steps(graph=False)[0]
    samples = torch.tensor([harness_local, bare_local], dtype=torch.float64)
    gathered = [torch.empty_like(samples) for _ in range(world_size)]
    dist.all_gather(gathered, samples, group=group)
    worst = torch.stack(gathered).max(dim=0).values  # a step ends when its slowest rank does
    harness, bare = worst[0].tolist(), worst[1].tolist()
    return {"harness": harness, "bare": bare}


def main() -> None:
    from tests.distributed import run_ranks

    result = run_ranks(_measure, 2, timeout=600)[0]
    harness = statistics.median(result["harness"])
    bare = statistics.median(result["bare"])
    print(f"Kimi-K2.5 verify step, T={TOKENS}, TP 2 on gloo, {STEPS} steps of each, alternating")
    print(f"  bare loop of dist calls : median step {bare / 1000:8.3f} ms")
    print(f"  commprof harness        : median step {harness / 1000:8.3f} ms")
    print(f"  ratio harness / bare    : {harness / bare:.3f}  (target <= 1.03)")


if __name__ == "__main__":
    main()
