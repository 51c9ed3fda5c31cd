"""What a run records about where it ran: versions, GPUs, host, command line and the environment that matters."""

from __future__ import annotations

import os
import platform
import socket
import sys
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

# Variables that change what a collective does or how it is measured.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "FLASHINFER_", "OMP_", "GLOO_")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


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


def collect_meta(run_id: str, world_size: int, backend: str, argv: list[str]) -> dict[str, Any]:
    """meta.json's facts about this host and launch (see docs/results-schema.md)."""
    import torch

    return {
        "run_id": run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": argv,
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "world_size": world_size,
        "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")) or 1),
        "backend": backend,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl_version(),
            "driver": driver_version(),
            "flashinfer": package_version("flashinfer-python"),
            "commprof": package_version("commprof"),
        },
        "platform": {"system": platform.system(), "machine": platform.machine(), "python": sys.executable},
        "gpus": gpu_inventory(),
        "env": relevant_env(),
    }
