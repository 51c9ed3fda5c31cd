"""The sweep's time estimate: every worker set a point forks pays the start-up, the estimate is given again from the
first point's measured start-up and steps, and an estimate made on gloo says it is gloo's."""

import contextlib
from dataclasses import replace

import pytest
from rich.console import Console

from commprof.sweep.planning.config import parse_sweep
from commprof.sweep.planning.dryrun import (
    ASSUMED,
    ASSUMED_STEP_MS,
    on_launch,
    point_seconds,
    runs_on_nccl,
    size_lines,
    worker_sets,
)
from commprof.sweep.running.console import SweepConsole

SPEC = parse_sweep(
    'name = "e"\n[run]\nmodel = "llama-3.1-70b"\ntokens = [1, 4]\niterations = 9\nwarmup = 1\n', "e.toml"
)


def test_each_worker_set_a_point_forks_pays_the_start_up():
    assert worker_sets("nccl", nccl_debug=True, profile=False) == 2  # the timed set and NCCL's logging probe
    assert worker_sets("nccl", nccl_debug=False, profile=True) == 2
    assert worker_sets("gloo", nccl_debug=True, profile=False) == 1
    one, two = (point_seconds(SPEC, replace(ASSUMED, worker_sets=n), 9, 1) for n in (1, 2))
    assert two - one == ASSUMED.overhead_s
    assert (
        "per point: 2 x 3.00 s start-up (worker sets)"
        in size_lines(SPEC, replace(ASSUMED, worker_sets=2), 1, "nccl")[1]
    )


def test_an_estimate_made_on_gloo_says_so():
    (_, per_point) = size_lines(SPEC, ASSUMED, 1, "gloo")
    assert "on gloo: CPU ranks, not what this sweep takes on GPUs" in per_point
    assert "on gloo" not in size_lines(SPEC, ASSUMED, 1, "nccl")[1]


def record(tokens: int, mode: str, step_us: float = 2000.0, duration_s: float = 4.0) -> dict:
    return {"kind": "step", "tokens": tokens, "mode": mode, "status": "ok", "step_us": {"median": step_us}} | {
        "duration_s": duration_s
    }


def test_the_first_measured_point_gives_the_estimate_again_from_its_own_start_up(tmp_path, capsys):
    estimates = []

    def estimate(cost=ASSUMED):
        estimates.append(cost)
        return size_lines(SPEC, replace(cost, worker_sets=2), 1, "gloo")

    console = SweepConsole(enabled=True, estimate=estimate, steps=(9, 1))
    console.console = Console(stderr=True, width=400, force_terminal=False)
    console.start(3, tmp_path)
    crashed = record(4, "eager") | {"status": "crashed", "step_us": None}
    console.point_measured([record(1, "eager", duration_s=1.0), crashed])  # no time at T = 4: no cost from it
    console.point_measured([record(1, "eager"), record(4, "eager")])
    console.point_measured([record(1, "eager", duration_s=100.0), record(4, "eager", duration_s=100.0)])  # once only
    console.stop()
    err = capsys.readouterr().err
    assert [cost.basis.startswith("measured on this launch") for cost in estimates] == [False, True]
    measured = estimates[1]
    # its duration less every step it ran: 1 checked + 1 warm-up + 9 timed + 1 + 9 per-op, at each T
    assert measured.overhead_s == pytest.approx(4.0 - (2.0 + 2.0) * 21 / 1000.0)
    assert "after the first point: 1 point will run" in err and "per point: 2 x 3.92 s start-up" in err


@contextlib.contextmanager
def _counting_rank(plan):
    """torch.distributed's all-reduce counting its calls, set up for `plan` on one in-process gloo rank."""
    import torch
    import torch.distributed as dist

    from commprof.impls.torch_dist import TorchAllReduce

    class Counting(TorchAllReduce):
        calls = 0

        def all_reduce(self, x):
            self.calls += 1
            return super().all_reduce(x)

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        impl = Counting({})
        impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
        yield impl
    finally:
        dist.destroy_process_group()


def test_the_estimate_counts_every_step_the_harness_runs_per_mode():
    """A replay on one in-process gloo rank calls the all-reduce once per step: as many as steps_per_mode."""
    import torch

    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode
    from commprof.replay.step_counts import steps_per_mode

    plan = build_step_plan(ModelShape("tiny", 2, 64, 256, "bfloat16", "test"), 1, 2)
    with _counting_rank(plan) as impl:
        replay = StepReplay(plan, impl, impl.group, torch.device("cpu"), ReplayConfig(iterations=4, warmup=2))
        assert replay_mode(replay, "eager").status == "ok"
    reductions = sum(1 for op in plan.ops if op.collective == "all_reduce")
    assert impl.calls == steps_per_mode(4, 2) * reductions == (1 + 2 + 4 + 1 + 4) * reductions


def test_only_a_point_of_nccls_own_all_reduce_pays_the_logging_worker():
    cost = on_launch(ASSUMED, "nccl", nccl_debug=True, profile=False)
    assert cost.worker_sets == 2 and cost.logged
    nccl, kernel = point_seconds(SPEC, cost, 9, 1), point_seconds(SPEC, cost, 9, 1, on_nccl=False)
    # the logging worker: one start-up and 1 checked + 1 timed + 1 per-op step per T, each mode
    assert nccl - kernel == pytest.approx(ASSUMED.overhead_s + 3 * 2 * 2 * ASSUMED_STEP_MS / 1000.0)
    assert runs_on_nccl("default", "nccl") and runs_on_nccl("nccl+rmsnorm", "nccl")
    assert not runs_on_nccl("flashinfer-pcie-ipc", "nccl") and not runs_on_nccl("default", "gloo")


def test_a_crossover_size_is_checked_then_timed_once():
    """One size of a crossover round: the checked first step and one timed pass with its per-op pass, as many
    all-reduce calls as steps_per_mode counts (it was timed twice)."""
    import torch

    from commprof.replay.size_timing import SizeTiming, size_plan, time_size
    from commprof.replay.step_counts import steps_per_mode

    with _counting_rank(size_plan(4096, 1)) as impl:
        timed = time_size(impl, 4096, impl.group, torch.device("cpu"), SizeTiming(rounds=3, warmup=1))
    assert timed.status == "ok" and timed.time_us > 0
    reductions = sum(1 for op in size_plan(4096, 1).ops if op.collective == "all_reduce")
    assert impl.calls == steps_per_mode(3, 1) * reductions
