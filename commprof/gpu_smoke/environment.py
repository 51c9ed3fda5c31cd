"""Whether this machine can run the GPU paths at all: what torch, NVML and FlashInfer say, and the decision.

No GPU anywhere (NVML sees none) is a skip; GPUs that NVML sees but torch cannot use (a CPU build of torch, a
CUDA 13 wheel on an older driver) are a failure with torch's own reason, since every GPU path would be lost.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from commprof.impls.gating import FLASHINFER_INSTALL

RUN, SKIP, FAIL = "run", "skip", "fail"
# What the GPU paths import, by import name (tomllib on Python >= 3.11, its backport tomli before).
NEEDED_MODULES = ("click", "rich", "jinja2", "pandas", "matplotlib", "pynvml", "pytest")


@dataclass
class SmokeEnvironment:
    """What this machine offers the GPU paths; every field is what its source said, or None."""

    torch_version: str
    torch_cuda: str | None  # torch.version.cuda; None: a CPU build of torch
    cuda_available: bool
    cuda_error: str | None  # torch's reason when it cannot use CUDA
    gpus: list[str] = field(default_factory=list)  # torch's device names
    nvml_gpus: int | None = None  # None: NVML could not be asked
    nvml_detail: str = ""  # the driver and CUDA version NVML reports, or why NVML is absent
    nccl_version: str | None = None
    flashinfer_version: str | None = None
    missing_modules: list[str] = field(default_factory=list)  # needed by the GPU paths, not importable here

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        gpus = f"{len(self.gpus)} GPU(s): {', '.join(sorted(set(self.gpus)))}" if self.gpus else "no CUDA device"
        flashinfer = self.flashinfer_version or f"not installed ({FLASHINFER_INSTALL})"
        return (
            f"torch {self.torch_version} (CUDA {self.torch_cuda or 'none: CPU build'}), {gpus}; "
            f"NCCL {self.nccl_version or '-'}; NVML: {self.nvml_detail}; FlashInfer {flashinfer}"
        )


def decide(env: SmokeEnvironment) -> tuple[str, str]:
    """(run / skip / fail, one line saying why). Pure."""
    if env.cuda_available and env.gpus:
        if env.missing_modules:
            return FAIL, (
                f"{env.describe()}; but this interpreter lacks {', '.join(env.missing_modules)}, which the GPU "
                "paths import: install them, or run with a python that has them (make gpu-smoke PY=...)"
            )
        return RUN, env.describe()
    if env.nvml_gpus:
        if env.torch_cuda is None:
            why = f"this torch ({env.torch_version}) is a CPU build: install a CUDA build of torch"
        else:
            why = f"torch {env.torch_version} (built for CUDA {env.torch_cuda}) cannot use them: {env.cuda_error}"
        return FAIL, f"NVML sees {env.nvml_gpus} GPU(s) ({env.nvml_detail}) but {why}"
    return SKIP, f"no CUDA GPU here ({env.nvml_detail}; torch {env.torch_version}): every GPU path skipped"


def probe_environment() -> SmokeEnvironment:
    """Ask torch, NVML and package metadata; initializes CUDA in this process when there is one."""
    import torch

    from commprof.doctor.topology_probe import probe_topology
    from commprof.impls.context import installed_version
    from commprof.runmeta import nccl_version

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    error = None
    if not available:
        try:
            torch.cuda.init()  # raises with torch's reason (no driver, driver too old, not compiled with CUDA)
        except Exception as exc:  # whatever torch raises is the reason to show
            error = f"{type(exc).__name__}: {exc}".strip()
        if not error and caught:
            error = str(caught[0].message)
    topology = probe_topology()
    if topology["source"] == "nvml":
        nvml_gpus = len(topology["gpus"])
        detail = f"driver {topology['driver_version']}, CUDA {topology['cuda_driver_version']}"
    else:
        nvml_gpus, detail = None, topology["reason"]
    return SmokeEnvironment(
        torch_version=torch.__version__,
        torch_cuda=torch.version.cuda,
        cuda_available=available,
        cuda_error=(error or None) and error.splitlines()[0][:500],
        gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else [],
        nvml_gpus=nvml_gpus,
        nvml_detail=detail or "",
        nccl_version=nccl_version() if available else None,
        flashinfer_version=installed_version("flashinfer-python", "flashinfer"),
        missing_modules=missing_modules(),
    )


def missing_modules() -> list[str]:
    """The modules the GPU paths import that this interpreter cannot find (without importing them)."""
    import importlib.util
    import sys

    toml = "tomllib" if sys.version_info >= (3, 11) else "tomli"
    return [name for name in (*NEEDED_MODULES, toml) if importlib.util.find_spec(name) is None]
