"""One all-reduce size timed on the ranks of a live process group (gloo or NCCL), for the crossover search.

Each size is a step of `ops` all-reduces of one [1, S / element size] tensor (the replay harness, verified
first and on its last timed round), timed once, eagerly or as a captured CUDA graph (its per-op pass: captured_ops.py); a size's time is the max
over ranks of each rank's min over rounds of the per-op time, so one slow round does not decide and the slowest
rank does.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.impls.base import AllReduceImpl
from commprof.planner.models import DTYPE_BYTES, ModelShape
from commprof.planner.plan import build_step_plan

CROSSOVER_LAYERS = 4  # 2 x 4 + 1 all-reduces per step: enough ops per round, few enough to keep sizes cheap


@dataclass(frozen=True)
class SizeTiming:
    """How each size is timed: rounds, warm-up, mode, dtype."""

    rounds: int = 10
    warmup: int = 2
    mode: str = "eager"
    dtype: str = "bfloat16"


@dataclass(frozen=True)
class SizeTime:
    """One size's outcome: "ok" with its time, else the harness's status and why."""

    status: str
    time_us: float | None = None
    message: str | None = None


def size_plan(nbytes: int, world_size: int, dtype: str = "bfloat16"):
    """A step plan whose all-reduces are all of `nbytes` (T = 1, hidden = nbytes / element size)."""
    elem = DTYPE_BYTES[dtype]
    model = ModelShape("crossover", CROSSOVER_LAYERS, max(nbytes // elem, 1), 8 * world_size, dtype, "crossover search")
    return build_step_plan(model, world_size, 1, "decode", dtype)


def time_size(impl: AllReduceImpl, nbytes: int, group, device, timing: SizeTiming) -> SizeTime:
    """The max over ranks of the min over rounds of one all-reduce's time (µs), verified first and once more on
    its last timed round, timed once; a collective on every rank of `group` (the harness makes every rank reach
    the same status)."""
    import torch
    import torch.distributed as dist

    from commprof.replay.harness import (
        ReplayConfig,
        StepReplay,
        last_step_check,
        verify_mode,
        worse_check,
        wrong_status,
    )

    config = ReplayConfig(iterations=timing.rounds, warmup=timing.warmup)
    plan = size_plan(nbytes, dist.get_world_size(group), timing.dtype)
    replay = StepReplay(plan, impl, group, device, config)
    failed, first, _ = verify_mode(replay, timing.mode)
    if failed is not None:
        return SizeTime(failed.status, None, failed.message)
    if not first.ok:
        return SizeTime(wrong_status(timing.mode), None, first.describe())
    steps, ops = replay.time_steps(graph=timing.mode == "graph")
    _, wrong = worse_check(first, last_step_check(replay, timing.mode))
    if wrong is not None:
        return SizeTime(wrong_status(timing.mode), None, wrong)
    all_reduces = [i for i, op in enumerate(plan.ops) if op.collective == "all_reduce"]
    if ops:
        per_round = [sum(row[i] for i in all_reduces) / len(all_reduces) for row in ops]
    else:  # no per-op split (the per-op capture failed): its all-reduces share the step (the gather is counted)
        per_round = [s / len(all_reduces) for s in steps]
    best = torch.tensor([min(per_round)], dtype=torch.float64, device=device)
    dist.all_reduce(best, op=dist.ReduceOp.MAX, group=group)
    return SizeTime("ok", float(best.item()))


def time_sizes(impl: AllReduceImpl, sizes: list[int], group, device, timing: SizeTiming) -> dict[int, float]:
    """Per size, its time (µs) as time_size gives it; a failed size is absent."""
    out: dict[int, float] = {}
    for nbytes in sizes:
        timed = time_size(impl, nbytes, group, device, timing)
        if timed.status == "ok":
            out[nbytes] = timed.time_us
    return out
