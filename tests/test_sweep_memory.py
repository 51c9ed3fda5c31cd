"""The sweep's memory check: the replay layout's size equals what StepTensors allocates, and a T that cannot fit
is refused in one line before any process starts."""

import pytest
import torch

from commprof.errors import UsageError
from commprof.planner.models import load_model
from commprof.planner.plan import build_step_plan
from commprof.planner.speculative import PlanOptions
from commprof.replay.replay_tensors import StepTensors, step_tensor_bytes
from commprof.sweep.planning.config import default_sweep
from commprof.sweep.planning.spec import RunOverrides
from commprof.sweep.running import memory


def _held_bytes(tensors: StepTensors) -> int:
    """Bytes of every distinct storage StepTensors keeps, except the RMSNorm weight."""
    storages = {}
    for value in vars(tensors).values():
        for t in _tensors(value):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    for rows in tensors.reduce_rows.values():
        for t in _tensors(vars(rows)):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    storages.pop(tensors.weight.untyped_storage().data_ptr())
    return sum(storages.values())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


@pytest.mark.parametrize(
    "model, options, fused",
    [
        ("kimi-k2.5", PlanOptions(), False),
        ("kimi-k2.5", PlanOptions(), True),
        ("llama-3.1-70b", PlanOptions(spec="eagle", num_steps=3), True),
        ("kimi-k2.5", PlanOptions(dp_attention=True), False),
    ],
)
def test_the_estimate_is_what_step_tensors_allocates(model, options, fused):
    plan = build_step_plan(load_model(model), 4, 4, "verify", None, options)
    assert "all_gather" in {op.collective for op in plan.ops}
    tensors = StepTensors(plan, rank=1, world=4, device=torch.device("cpu"), fused=fused)
    assert step_tensor_bytes(plan, 4, fused) == _held_bytes(tensors)


def test_a_step_too_large_for_a_rank_is_refused_with_the_largest_t_that_fits(monkeypatch):
    monkeypatch.setattr(memory, "rank_memory", lambda backend, ranks: (8 * 2**30, "each rank has (test)"))
    with pytest.raises(
        UsageError, match=r"T = 100000: .* per rank, more than 80% of the 8 GiB .*largest T that fits is about \d+"
    ):
        memory.check_memory(default_sweep(RunOverrides(tokens=(1, 100000), tp=8)), 8, "nccl")
    memory.check_memory(default_sweep(RunOverrides(tokens=(1, 16), tp=8)), 8, "nccl")


def test_unknown_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(memory, "rank_memory", lambda backend, ranks: (None, "GPU memory unknown (no NVML)"))
    memory.check_memory(default_sweep(RunOverrides(tokens=(10**6,), tp=8)), 8, "nccl")


def test_gloo_shares_the_host_memory_between_its_ranks(monkeypatch):
    monkeypatch.setattr(memory, "_host_available", lambda: 64 * 2**30)
    assert memory.rank_memory("gloo", 4) == (
        16 * 2**30,
        "each of this host's 4 rank(s) has (its available memory, shared)",
    )


def test_a_crossover_stage_larger_than_a_rank_is_refused_before_any_process_starts(monkeypatch):
    from commprof.sweep.planning.config import parse_sweep

    monkeypatch.setattr(memory, "rank_memory", lambda backend, ranks: (11 * 2**30, "each rank has (test)"))
    text = 'name = "x"\n[run]\ntokens = [1]\n[[stages]]\nkind = "crossover"\nmax_bytes = {}\n'
    with pytest.raises(UsageError, match=r"stages\[0\].max_bytes = 1073741824: a crossover round .* lower max_bytes"):
        memory.check_memory(parse_sweep(text.format(1 << 30)), 2, "gloo")
    memory.check_memory(parse_sweep(text.format(1 << 20)), 2, "gloo")
