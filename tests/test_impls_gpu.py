"""Each built-in all-reduce on the local GPUs, through the real harness, eager and CUDA graph, exact-checked.

Runs at the largest world size of 8, 4, 2 that the visible GPUs allow; a built-in this machine cannot run
(e.g. the TRT-LLM kernels on SM80, PCIe IPC without P2P) is skipped with its gating reason. FlashInfer
builds its kernels on first use, which can take minutes.
"""

import os
from datetime import timedelta

import pytest
import torch

from tests.distributed import free_port

# Kimi-K2.5's hidden size and vocabulary, 3 layers: 7 all-reduces and the logits all-gather per step.
MODEL = dict(
    name="kimi-k2.5-3-layers", num_layers=3, hidden_size=7168, vocab_size=163840, dtype="bfloat16", source="test"
)
TOKENS = (1, 16)  # T = 1 is below every world size: two-shot refuses it per T

CASES = [
    ("nccl", {}),
    ("nccl+rmsnorm", {}),
    ("flashinfer-fused", {"use_oneshot": True}),
    ("flashinfer-fused", {"use_oneshot": False}),
    ("flashinfer-pcie-ipc", {"tune": False}),
    ("symm-mem", {"variant": "one_shot"}),
    ("symm-mem", {"variant": "two_shot"}),
]


def world_size() -> int:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return next((n for n in (8, 4, 2) if n <= count), 0)


def _rank(rank, world, port, name, options, queue):
    import torch.distributed as dist

    from commprof.impls.context import build_impl_context
    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    model = ModelShape(**MODEL)
    cls = load_impl(name)
    ctx = build_impl_context("nccl", world, model.dtype, TOKENS, model.hidden_size, options)
    support = cls.support(ctx)
    if not support:
        queue.put((rank, {"unsupported": support.reason}))
        return
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timedelta(seconds=300), device_id=device)
    results = {}
    impl = cls(options)
    plans = {t: build_step_plan(model, world, t) for t in TOKENS}
    try:
        impl.setup(dist.group.WORLD, plans[max(plans)], device)
        impl.prepare([(t, model.hidden_size) for t in TOKENS])
        for t, plan in plans.items():
            per_t = cls.support_tokens(ctx, t)
            if not per_t:
                results[t] = {"unsupported": per_t.reason}
                continue
            replay = StepReplay(plan, impl, dist.group.WORLD, device, ReplayConfig(iterations=5, warmup=2))
            results[t] = {mode: replay_mode(replay, mode).to_dict() for mode in ("eager", "graph")}
    finally:
        impl.teardown()
        dist.destroy_process_group()
    queue.put((rank, results))


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "name, options", CASES, ids=[f"{n}-{'-'.join(map(str, o.values())) or 'plain'}" for n, o in CASES]
)
def test_builtin_on_local_gpus(name, options):
    world = world_size()
    if world < 2:
        pytest.skip(f"needs at least 2 CUDA GPUs ({torch.cuda.device_count()} visible)")
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, name, options, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=840) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0, f"rank process exited with {p.exitcode}"
    outcome = results[0]
    if "unsupported" in outcome:
        pytest.skip(f"{name} is unsupported here: {outcome['unsupported']}")
    ran = 0
    for t, modes in outcome.items():
        if "unsupported" in modes:
            assert t <= world and options.get("use_oneshot") is False, modes["unsupported"]
            continue
        for mode, result in modes.items():
            assert result["status"] == "ok", f"T={t} {mode}: {result['status']}: {result['message']}"
            assert result["check"]["bad_ops"] == 0
            ran += 1
    assert ran >= 2
