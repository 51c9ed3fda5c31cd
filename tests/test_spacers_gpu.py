"""The spacers' CUDA paths: the spin calibrated to µs, the GEMM spacer, %globaltimer arrival stamps, captured into
the step's graph, and graph-mode tails (median / max per replay) with compute and a late rank.

The CPU test binds every CUDA call the spacers make against this torch; the rest need a GPU (`make gpu-smoke`
runs `pytest -m gpu`). Two NCCL ranks share GPU 0 where there is one GPU.
"""

import inspect

import pytest
import torch

from commprof.planner.models import ModelShape
from commprof.planner.plan import build_step_plan
from commprof.planner.spacing import ComputeSpec, SkewSpec
from tests.distributed import run_nccl_ranks

TINY = ModelShape("tiny", 2, 1024, 4096, "bfloat16", "test", intermediate_size=4096)


def test_the_cuda_calls_of_the_spacers_exist_in_this_torch(monkeypatch):
    from commprof.replay import spacers

    slept = []
    signature = inspect.signature(torch.cuda._sleep)

    def sleep(cycles):
        signature.bind(cycles)
        assert isinstance(cycles, int) and cycles >= 1
        slept.append(cycles)

    monkeypatch.setattr(torch.cuda, "_sleep", sleep)
    plan = build_step_plan(TINY, 2, 4)
    skew = SkewSpec.parse({"rank": 0, "us": 10})
    spacer = spacers.Spacer(plan, ComputeSpec.parse("uniform:40"), skew, 0, torch.device("cpu"))
    spacer.device = torch.device("cuda")  # the CUDA branch, run on the stand-in
    spacer.cycles_per_us = 1500.0
    spacer.before(1)
    assert slept == [60_000, 15_000]
    # torch.mm(a, b, out=c), as the GEMM spacer calls it (on CPU tensors here).
    a, b, c = torch.ones(2, 3), torch.ones(3, 4), torch.empty(2, 4)
    torch.mm(a, b, out=c)
    assert c.sum() == 24


@pytest.mark.gpu
@pytest.mark.processes
def test_the_spin_spacer_runs_its_length_and_the_gemm_spacer_runs():
    from commprof.replay.spacers import Spacer

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    plan = build_step_plan(TINY, 1, 4)
    for compute, check in (("uniform:200", "length"), ("gemm", "runs")):
        spacer = Spacer(plan, ComputeSpec.parse(compute), SkewSpec(), 0, device, TINY.intermediate_size)
        for op in plan.ops:  # warm-up (the GEMMs' first call picks their kernels)
            spacer.compute(op.index)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for op in plan.ops:
            spacer.compute(op.index)
        end.record()
        end.synchronize()
        elapsed_us = start.elapsed_time(end) * 1000.0
        if check == "length":
            expected = 200.0 * (len(plan.ops) - 1)
            assert 0.85 * expected <= elapsed_us <= 1.3 * expected, (elapsed_us, expected)
        else:
            assert elapsed_us > 0 and spacer.has_compute


@pytest.mark.gpu
@pytest.mark.processes
def test_globaltimer_stamps_are_nanoseconds_on_the_stream():
    from commprof.replay.spacers import make_arrivals

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    arrivals, why = make_arrivals(3, device)
    if arrivals is None:
        pytest.skip(why)  # no Triton on this box: the record then says waiting was not measured, and why
    arrivals.stamp(0)
    torch.cuda._sleep(1_000_000)
    arrivals.stamp(1)
    torch.cuda._sleep(2_000_000)
    arrivals.stamp(2)
    arrivals.stamp_reference()
    first, second, third, reference = arrivals.read()
    assert 0 < second - first < third - second < 100_000_000  # ns; the longer spin is the longer gap
    assert reference >= third


def _graph_replay(rank, world_size, device):
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(TINY, world_size, 4)
    impl = load_impl("nccl")({})
    impl.setup(dist.group.WORLD, plan, device)
    out = []
    for compute, skew in (("none", SkewSpec()), ("uniform:100", SkewSpec.parse({"rank": 1, "us": 200}))):
        config = ReplayConfig(iterations=20, warmup=3, compute=ComputeSpec.parse(compute), skew=skew)
        replay = StepReplay(plan, impl, dist.group.WORLD, device, config)
        out.append({mode: replay_mode(replay, mode).to_dict() for mode in ("eager", "graph")})
    return out, len(plan.ops)


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(600)
def test_graph_mode_has_per_replay_tails_and_the_spacers_are_captured():
    (bare, spaced), ops = run_nccl_ranks(_graph_replay, 2)[0]
    for result in (bare, spaced):
        graph = result["graph"]
        assert graph["status"] == "ok", graph["message"]
        # One sample per replay: the median and the tail (max of 20) of the step exist for graph mode as for eager.
        assert graph["step_us"]["n"] == 20 and graph["step_us"]["max"] >= graph["step_us"]["median"] > 0
    # The spacers ran inside the captured graph: its step holds the compute (100 µs per gap) ...
    compute = 100.0 * (ops - 1)
    assert spaced["graph"]["step_us"]["median"] >= bare["graph"]["step_us"]["median"] + 0.8 * compute
    assert spaced["graph"]["compute_us"]["median"] >= 0.8 * compute
    # ... and eager mode measured the late rank's waiting on %globaltimer (or said why not).
    eager = spaced["eager"]
    if eager["wait_clock"] == "cuda_globaltimer":
        assert eager["wait_us"]["median"] >= 0.5 * 200.0 * ops
    else:
        assert eager["wait_clock"].startswith("not measured")
