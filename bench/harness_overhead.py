"""Does the harness add to what it measures? commprof's median step vs a bare loop of the same calls.

Two gloo ranks, the Kimi-K2.5 verify plan at TP 2, the same tensors; the two loops alternate in rounds so
machine noise hits both alike. Prints both medians and their ratio (target <= 1.03).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUNDS = 6
STEPS = 15
TOKENS = 4


def _measure(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.harness import ReplayConfig, StepReplay, _all_gather_single, replay_mode
    from commprof.impls.registry import load_impl
    from commprof.models import load_model
    from commprof.plan import build_step_plan

    plan = build_step_plan(load_model("kimi-k2.5"), world_size, TOKENS)
    impl = load_impl("gloo")()
    group = dist.group.WORLD
    impl.setup(group, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, group, torch.device("cpu"), ReplayConfig(iterations=STEPS, warmup=2))
    ops = [(op.collective, replay.inputs[replay.row_of[op.index]] if op.collective == "all_reduce" else None)
           for op in plan.ops]

    def bare_steps() -> list[float]:
        samples = []
        for _ in range(STEPS):
            replay.refill()
            dist.barrier(group=group)
            start = time.perf_counter_ns()
            for collective, tensor in ops:
                if tensor is not None:
                    dist.all_reduce(tensor, group=group)
                else:
                    _all_gather_single(replay.gather_out, replay.gather_in, group=group)
            samples.append((time.perf_counter_ns() - start) / 1000.0)
        return samples

    harness, bare = [], []
    for _ in range(ROUNDS):
        result = replay_mode(replay, "eager")
        assert result.status == "ok", result.message
        # The harness reports the per-step maximum over ranks; compare like with like.
        harness.append(result.step_us["median"])
        local = torch.tensor(bare_steps(), dtype=torch.float64)
        gathered = [torch.empty_like(local) for _ in range(world_size)]
        dist.all_gather(gathered, local, group=group)
        bare.append(float(torch.stack(gathered).max(dim=0).values.median()))
    return {"harness": harness, "bare": bare}


def main() -> None:
    from tests.distributed import run_ranks

    result = run_ranks(_measure, 2, timeout=600)[0]
    harness = statistics.median(result["harness"])
    bare = statistics.median(result["bare"])
    print(f"Kimi-K2.5 verify step, T={TOKENS}, TP 2 on gloo, {ROUNDS} alternating rounds of {STEPS} steps")
    print(f"  bare loop of dist calls : median step {bare / 1000:8.3f} ms")
    print(f"  commprof harness        : median step {harness / 1000:8.3f} ms")
    print(f"  ratio harness / bare    : {harness / bare:.3f}  (target <= 1.03)")


if __name__ == "__main__":
    main()
