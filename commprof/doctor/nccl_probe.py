"""A real NCCL all-reduce on a set of GPUs, in its own process tree with a time limit.

`run_probe()` (doctor side, never imports torch) starts one `python -m commprof.doctor.nccl_probe --rank r`
per GPU; the ranks all-reduce, check the sum, optionally load the links while NVML reads their generation,
and rank 0 writes a JSON result. A hang is killed with its whole session: status "timeout".
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
from pathlib import Path
from typing import Any

NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV,TUNING"}


def run_probe(
    gpus: list[int],
    extra_env: dict[str, str],
    timeout_s: float,
    log_path: Path,
    load_seconds: float = 0.0,
    backend: str = "nccl",
    module: str = "commprof.doctor.nccl_probe",
) -> dict[str, Any]:
    """Run the probe on NVML GPU indices `gpus`; returns {"gpus", "env", "status", "seconds", "message", ...}.

    `backend="gloo"` runs the same ranks on CPU (tests); `module` swaps the worker (tests inject hangs).
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
        backend,
    ]
    result: dict[str, Any] = {"gpus": gpus, "env": extra_env, "log": str(log_path)}
    start = time.monotonic()
    with open(log_path, "ab") as log:
        # One process per rank, each in its own session so a hang is killed with anything it started.
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", module, "--rank", str(rank), *common],
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
    links = _links_under_load(rank, load_seconds) if cuda and load_seconds > 0 else {}
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
                    "link_load": links,
                    "message": "" if status == "ok" else f"all-reduce sum off by {err.item()}",
                }
            )
        )
    dist.destroy_process_group()


def _links_under_load(rank: int, seconds: float) -> dict[str, dict[str, int]]:
    """Queue large all-reduces for about `seconds`, and read every GPU's PCIe link through NVML while they run."""
    import torch
    import torch.distributed as dist

    big = torch.ones(16 << 20, device=torch.device("cuda", rank))  # 64 MiB
    links: dict[str, dict[str, int]] = {}
    # A fixed count on every rank (a deadline could differ between ranks and leave one waiting).
    for step in range(max(1, round(seconds / 0.05))):
        for _ in range(4):
            dist.all_reduce(big)
        if rank == 0 and step == 0:
            time.sleep(0.02)
            links = _nvml_links()
        torch.cuda.synchronize()
    return links


def _nvml_links() -> dict[str, dict[str, int]]:
    import pynvml

    from commprof.doctor.topology_probe import normalize_bus_id

    pynvml.nvmlInit()
    try:
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus_id = pynvml.nvmlDeviceGetPciInfo(h).busId
            bus_id = normalize_bus_id(bus_id.decode() if isinstance(bus_id, bytes) else bus_id)
            out[bus_id] = {
                "gen": pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
                "width": pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
            }
        return out
    finally:
        pynvml.nvmlShutdown()


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
