"""Run a function on N real gloo ranks in fresh processes and collect what each returns.

gloo ranks are forked from one multiprocessing fork server that imported torch once for the whole session (as
commprof's own fork server does for sweep points): each rank is still a fresh process with its own group, but
does not pay torch's import (seconds on a 2-core CI machine) again. NCCL ranks are spawned: CUDA must start
clean in them.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, fn, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        queue.put((rank, fn(rank, world_size, *args)))
    finally:
        dist.destroy_process_group()


# What the gloo ranks' fork server imports before its first fork: torch, the modules every replay uses, and pytest,
# which each rank imports with the test module its function is unpickled from (a tenth of a CPU-second a rank).
PRELOAD = [
    "torch",
    "torch.distributed",
    "commprof.replay.harness",
    "commprof.impls.registry",
    "commprof.planner.plan",
    "pytest",
    "tests.distributed",
]


def _gloo_context():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts: on the session's first run_ranks
    return ctx


def _collect(procs, queue, timeout: float) -> dict:
    """Each rank's result; a rank that never answers fails the test and every rank is ended, never left behind."""
    try:
        results = dict(queue.get(timeout=timeout) for _ in procs)
        for p in procs:
            p.join(timeout=timeout)
            assert p.exitcode == 0, f"rank process exited with {p.exitcode}"
        return results
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def run_ranks(fn, world_size: int = 2, args: tuple = (), timeout: float = 120.0) -> list:
    """fn(rank, world_size, *args) on every rank of a fresh gloo group; returns results by rank."""
    ctx = _gloo_context()
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, fn, args, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    results = _collect(procs, queue, timeout)
    return [results[r] for r in range(world_size)]


def _nccl_worker(rank, world_size, port, fn, args, queue):
    import torch

    from commprof.sweep.running.runner import shared_gpu_env

    gpus = torch.cuda.device_count()
    if gpus < world_size:
        os.environ.update(shared_gpu_env(rank))  # read by NCCL at communicator init
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank % gpus)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timedelta(seconds=120), device_id=device)
    try:
        queue.put((rank, fn(rank, world_size, device, *args)))
    finally:
        dist.destroy_process_group()


def run_nccl_ranks(fn, world_size: int = 2, args: tuple = (), timeout: float = 300.0) -> list:
    """fn(rank, world_size, device, *args) on every rank of a fresh NCCL group, one GPU per rank where there
    are enough, else ranks sharing GPUs as `--share-gpus` does; returns results by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_nccl_worker, args=(r, world_size, port, fn, args, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    results = _collect(procs, queue, timeout)
    return [results[r] for r in range(world_size)]
