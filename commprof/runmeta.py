"""What a run records about where it ran: versions, GPUs, host, command line and the environment that matters."""

from __future__ import annotations

import os
import platform
import socket
import sys
from datetime import datetime, timezone
from typing import Any

from commprof.versions import installed_version

# Variables that change what a collective does or how it is measured.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "FLASHINFER_", "OMP_", "GLOO_")


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def nccl_version() -> str | None:
    """The NCCL torch links, as "2.27.3"; None on a CPU build of torch."""
    import torch

    try:
        if not torch.cuda.is_available():
            return None
        version = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError):
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            value = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no NVML library, or no GPU: all mean "none here"
        return None
    return value.decode() if isinstance(value, bytes) else value


def gpu_inventory() -> list[dict[str, Any]]:
    """Name, compute capability, memory and PCI bus id of each visible GPU (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "name": props.name,
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
                "pci_bus_id": f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                if hasattr(props, "pci_bus_id")
                else None,
            }
        )
    return gpus


def launch_facts(argv: list[str], measuring: bool = True) -> dict[str, Any]:
    """The fields of meta.json about this host and launch (records.run_meta.run_meta takes them). `measuring`: the
    run times collectives here, so torch, CUDA, NCCL, the GPUs and the environment are recorded; a command that
    only reads files (simulate, an import) names Python and commprof alone."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "commprof": installed_version("commprof")}
    facts: dict[str, Any] = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": argv,
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "nnodes": 1,
        "versions": versions,
        "platform": {"system": platform.system(), "machine": platform.machine(), "python": sys.executable},
        "gpus": [],
        "env": {},
    }
    if measuring:
        import torch

        versions.update(
            torch=torch.__version__,
            cuda=torch.version.cuda,
            nccl=nccl_version(),
            driver=driver_version(),
            flashinfer=installed_version("flashinfer-python"),
        )
        facts.update(
            nnodes=int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")) or 1),
            gpus=gpu_inventory(),
            env=relevant_env(),
        )
    return facts
