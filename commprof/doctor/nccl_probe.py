"""A real NCCL all-reduce on a set of GPUs, in its own process tree with a time limit.

`run_probe()` (doctor side, never imports torch) starts one `python -m commprof.doctor.nccl_probe --rank r`
per GPU; the ranks all-reduce, check the sum, optionally load the links while NVML reads their generation,
and rank 0 writes a JSON result. A hang is killed with its whole session: status "timeout".

The load is copies, not collectives: host <-> device copies through pinned memory load every GPU's own link
(also at one GPU, where an in-place NCCL sum moves nothing), and a copy to the next GPU loads the peer path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV,TUNING"}
LOAD_BYTES = 64 << 20  # per copy
# Round trips queued at once: > 60 ms of traffic even on a Gen5 x16 link, so NVML reads the link (and its
# 20 ms throughput sample) while the copies run.
LOAD_ROUNDS = 24
READ_AFTER_S = 0.025


@dataclass(frozen=True)
class ProbeWorker:
    """What each probe rank runs: the real NCCL worker, or (tests) another backend or module."""

    backend: str = "nccl"
    """torch.distributed backend of the ranks ("gloo" runs them on CPU)."""
    module: str = "commprof.doctor.nccl_probe"
    """The module each rank runs with `python -m` (tests swap in one that hangs or crashes)."""


NCCL_WORKER = ProbeWorker()


def run_probe(
    gpus: list[int],
    extra_env: dict[str, str],
    timeout_s: float,
    log_path: Path,
    load_seconds: float = 0.0,
    worker: ProbeWorker = NCCL_WORKER,
) -> dict[str, Any]:
    """Run the probe on NVML GPU indices `gpus`; returns {"gpus", "env", "status", "seconds", "message", ...}.

    `worker=ProbeWorker("gloo")` runs the same ranks on CPU (tests); its `module` swaps the worker (tests inject
    hangs).
    """
    out_path = log_path.with_suffix(".json")
    env = {
        **os.environ,
        **NCCL_DEBUG_ENV,
        **extra_env,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
    }
    common = [
        "--nranks",
        str(len(gpus)),
        "--port",
        str(free_port()),
        "--out",
        str(out_path),
        "--load-seconds",
        str(load_seconds),
        "--backend",
        worker.backend,
    ]
    result: dict[str, Any] = {"gpus": gpus, "env": extra_env, "log": str(log_path)}
    start = time.monotonic()
    with open(log_path, "ab") as log:
        # One process per rank, each in its own session so a hang is killed with anything it started.
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", worker.module, "--rank", str(rank), *common],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for rank in range(len(gpus))
        ]
        codes = _wait_all(procs, start + timeout_s)
    result["seconds"] = round(time.monotonic() - start, 2)
    if None in codes:
        hung = [rank for rank, code in enumerate(codes) if code is None]
        result.update(status="timeout", message=f"rank(s) {hung} gave no result within {timeout_s:g} s (hang): killed")
    elif any(codes):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        result.update(status="crashed", message=f"exit codes {codes}: " + " | ".join(tail))
    elif out_path.exists():
        result.update(json.loads(out_path.read_text()))
    else:
        result.update(status="crashed", message="rank 0 exited 0 without writing its result")
    return result


def _wait_all(procs: list[subprocess.Popen], deadline: float) -> list[int | None]:
    """Exit codes; None for a process still running at the deadline (then killed with its session)."""
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for proc, code in zip(procs, codes):
        if code is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return codes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, nranks: int, port: int, out: str, load_seconds: float, backend: str) -> None:
    import torch
    import torch.distributed as dist

    cuda = backend == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks, device_id=device if cuda else None
    )
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x)
    err = (x - nranks * (nranks + 1) / 2).abs().max()
    # One verify-step-sized message ([1, 7168] bf16) so the TUNING log shows NCCL's choice at that size.
    dist.all_reduce(torch.ones(1, 7168, dtype=torch.bfloat16, device=device))
    loaded = _links_under_load(rank, nranks, load_seconds) if cuda and load_seconds > 0 else {}
    dist.all_reduce(err, op=dist.ReduceOp.MAX)
    if cuda:
        torch.cuda.synchronize()
    if rank == 0:
        peers = (
            {
                f"{a}->{b}": torch.cuda.can_device_access_peer(a, b)
                for a in range(nranks)
                for b in range(nranks)
                if a != b
            }
            if cuda
            else {}
        )
        status = "ok" if err.item() == 0 else "wrong"
        Path(out).write_text(
            json.dumps(
                {
                    "status": status,
                    "max_abs_err": err.item(),
                    "can_access_peer": peers,
                    "link_load": loaded.get("links") or {},
                    "link_load_refused": loaded.get("links_refused") or {},  # GPU -> why NVML gave no reading
                    "load": loaded.get("load"),
                    "message": "" if status == "ok" else f"all-reduce sum off by {err.item()}",
                }
            )
        )
    dist.destroy_process_group()


def _links_under_load(rank: int, nranks: int, seconds: float) -> dict[str, Any]:
    """Keep this rank's links busy for about `seconds` with copies; rank 0 reads every GPU's link meanwhile.

    Returns {"links": NVML's reading per bus id (rank 0), "links_refused": why a GPU has none, "load": bytes,
    seconds and GB/s of this rank's copies}.
    """
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank)
    numel = LOAD_BYTES // 4
    block = torch.ones(numel, device=device)
    host = torch.empty(numel, pin_memory=True)  # pinned: copies run at the link's speed, without staging
    # Peer copies stage through the host where P2P is off: the peer path is loaded either way.
    peer = torch.empty(numel, device=torch.device("cuda", (rank + 1) % nranks)) if nranks > 1 else None
    stream = torch.cuda.Stream(device)
    links: dict[str, dict[str, int | None]] = {}
    refused: dict[str, str] = {}
    moved = 0
    dist.barrier()  # every rank starts loading together, so rank 0 reads while all links carry traffic
    started, read = time.monotonic(), rank != 0
    while not read or time.monotonic() - started < seconds:  # no collective inside: each rank loops on its own
        with torch.cuda.stream(stream):
            for _ in range(LOAD_ROUNDS):
                host.copy_(block, non_blocking=True)  # device -> host
                block.copy_(host, non_blocking=True)  # host -> device
                moved += 2 * LOAD_BYTES
                if peer is not None:
                    peer.copy_(block, non_blocking=True)
                    moved += LOAD_BYTES
        if not read:
            time.sleep(READ_AFTER_S)  # the copies are queued and running
            (links, refused), read = _nvml_links(), True
        stream.synchronize()
    took = time.monotonic() - started
    dist.barrier()
    return {
        "links": links,
        "links_refused": refused,
        "load": {"bytes": moved, "seconds": round(took, 3), "gbps": round(moved / took / 1e9, 2)},
    }


def _nvml_links() -> tuple[dict[str, dict[str, int | None]], dict[str, str]]:
    """(NVML's link reading per bus id, why a GPU has none): a GPU whose generation or width NVML refuses (a VM
    that hides PCIe links) or this nvidia-ml-py cannot ask is left out, so the check falls back to its idle view."""
    import pynvml

    from commprof.doctor.nvml_guard import NvmlCalls
    from commprof.doctor.topology_probe import as_text, normalize_bus_id

    try:
        pynvml.nvmlInit()
    except Exception as exc:  # the driver went away, or this process may not open NVML
        return {}, {"all GPUs": f"nvmlInit: {type(exc).__name__}: {exc}"}
    ask = NvmlCalls(pynvml)
    readings, refused = {}, {}
    try:
        for i in range(ask("nvmlDeviceGetCount") or 0):
            h = ask("nvmlDeviceGetHandleByIndex", i)
            pci = ask("nvmlDeviceGetPciInfo", h)
            where = normalize_bus_id(as_text(pci.busId)) if pci is not None else f"GPU {i}"
            reading = {
                "gen": ask("nvmlDeviceGetCurrPcieLinkGeneration", h),
                "width": ask("nvmlDeviceGetCurrPcieLinkWidth", h),
                # KB/s over NVML's 20 ms sample: the traffic the reading was taken under (None: not reported)
                "tx_kbps": ask("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
                "rx_kbps": ask("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
            }
            if pci is None or reading["gen"] is None or reading["width"] is None:
                refused[where] = "; ".join(f"{name}: {why}" for name, why in ask.unanswered.items())
            else:
                readings[where] = reading
            ask.unanswered.clear()
        if not readings and "nvmlDeviceGetCount" in ask.unanswered:
            refused["all GPUs"] = f"nvmlDeviceGetCount: {ask.unanswered['nvmlDeviceGetCount']}"
    finally:
        ask("nvmlShutdown")
    return readings, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--nranks", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--load-seconds", type=float, default=0.0)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    args = parser.parse_args(argv)
    _rank(args.rank, args.nranks, args.port, args.out, args.load_seconds, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
