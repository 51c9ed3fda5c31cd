"""Whether this machine can run the GPU paths at all: what NVML, torch and package metadata say, and the decision.

NVML is asked first (GPUs, SM, driver, compute mode), then torch in a child process, so this process never holds
a CUDA context (in exclusive-process mode one would lock every rank out). No GPU anywhere is a skip; GPUs that
torch cannot use (no torch, a CPU build, a CUDA 13 wheel on an older driver) are a failure with the reason,
since every GPU path would be lost. Runs on the standard library alone, so a bare python3 gets its answer.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from commprof.doctor.nvml_guard import NvmlCalls, nvml_py_version
from commprof.versions import installed_version

RUN, SKIP, FAIL = "run", "skip", "fail"
# What the GPU paths import, by import name (tomllib on Python >= 3.11, its backport tomli before).
NEEDED_MODULES = ("torch", "click", "msgspec", "rich", "jinja2", "pandas", "matplotlib", "pynvml", "pytest")
# nvmlDeviceGetComputeMode answers (NVML_COMPUTEMODE_*), named as nvidia-smi names them.
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
EXCLUSIVE_MODES = ("Exclusive_Process", "Exclusive_Thread")
TORCH_PROBE_TIMEOUT_S = 180
REPO = Path(__file__).resolve().parents[2]


@dataclass
class SmokeEnvironment:
    """What this machine offers the GPU paths; every field is what its source said, or None."""

    torch_version: str | None  # None: this python has no torch
    torch_cuda: str | None  # torch.version.cuda; None: a CPU build of torch
    cuda_available: bool
    cuda_error: str | None  # torch's reason when it cannot use CUDA
    gpus: list[str] = field(default_factory=list)  # torch's device names
    nvml_gpus: int | None = None  # None: NVML could not be asked
    nvml_detail: str = ""  # the driver and CUDA version NVML reports, or why NVML is absent
    nccl_version: str | None = None
    flashinfer_version: str | None = None
    missing_modules: list[str] = field(default_factory=list)  # needed by the GPU paths, not importable here
    python: str = ""  # version and executable
    nvml_py_version: str | None = None  # nvidia-ml-py's
    nvml_names: list[str] = field(default_factory=list)  # NVML's device names
    sm: list[str | None] = field(default_factory=list)  # compute capability per GPU, "9.0"
    compute_modes: list[str | None] = field(default_factory=list)  # per GPU, COMPUTE_MODES' names
    nvml_unanswered: dict[str, str] = field(default_factory=dict)  # NVML call -> why it gave no answer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exclusive(self) -> str | None:
        """Why ranks may not share a GPU here (an exclusive compute mode), or None."""
        modes = sorted({m for m in self.compute_modes if m in EXCLUSIVE_MODES})
        if not modes:
            return None
        return f"compute mode {'/'.join(modes)} (one process per GPU; `nvidia-smi -c DEFAULT` lifts it)"

    def describe(self) -> str:
        gpus = f"{len(self.gpus)} GPU(s): {', '.join(sorted(set(self.gpus)))}" if self.gpus else "no CUDA device"
        flashinfer = self.flashinfer_version or _not_installed()
        torch = f"torch {self.torch_version} (CUDA {self.torch_cuda or 'none: CPU build'})"
        modes = sorted({m for m in self.compute_modes if m and m != "Default"})
        return (
            f"{torch if self.torch_version else 'no torch'}, {gpus}; "
            f"NCCL {self.nccl_version or '-'}; NVML: {self.nvml_detail}; FlashInfer {flashinfer}"
            + (f"; compute mode {'/'.join(modes)}" if modes else "")
        )

    def lines(self) -> list[str]:
        """The environment as printed before anything else."""
        gpus = [
            f"GPU {i}: {name or '?'}, SM {sm or '?'}, compute mode {mode or '?'}"
            for i, (name, sm, mode) in enumerate(zip(self.nvml_names, self.sm, self.compute_modes))
        ]
        torch = (
            f"torch {self.torch_version} (CUDA {self.torch_cuda or 'none: CPU build'}); "
            + (
                f"CUDA usable, {len(self.gpus)} device(s)"
                if self.cuda_available
                else f"CUDA not usable: {self.cuda_error}"
            )
            if self.torch_version
            else "torch: not importable by this python"
        )
        unanswered = "; ".join(f"{name}: {why}" for name, why in sorted(self.nvml_unanswered.items()))
        return [
            f"python {self.python}",
            f"NVML: {self.nvml_detail}" + (f" (nvidia-ml-py {self.nvml_py_version})" if self.nvml_py_version else ""),
            *(gpus or ["GPUs: none seen by NVML"]),
            torch,
            f"NCCL {self.nccl_version or '- (none: no usable CUDA)'}",
            f"FlashInfer {self.flashinfer_version or _not_installed()}",
            f"missing: {', '.join(self.missing_modules) or 'nothing the GPU paths import'}",
            *([f"NVML gave no answer to: {unanswered}"] if unanswered else []),
        ]


def decide(env: SmokeEnvironment) -> tuple[str, str]:
    """(run / skip / fail, one line saying why). Pure."""
    if env.compute_modes and all(m == "Prohibited" for m in env.compute_modes):
        return FAIL, "every GPU is in compute mode Prohibited: no process may use them (`nvidia-smi -c DEFAULT`)"
    if env.cuda_available and env.gpus:
        if env.missing_modules:
            return FAIL, (
                f"{env.describe()}; but this interpreter lacks {', '.join(env.missing_modules)}, which the GPU "
                "paths import: install them, or run with a python that has them (make gpu-smoke PY=...)"
            )
        return RUN, env.describe()
    if env.nvml_gpus:
        if env.torch_version is None:
            why = f"this python ({sys.executable}) has no torch: run with the python that has torch"
        elif env.torch_cuda is None:
            why = f"this torch ({env.torch_version}) is a CPU build: install a CUDA build of torch"
        else:
            why = f"torch {env.torch_version} (built for CUDA {env.torch_cuda}) cannot use them: {env.cuda_error}"
        return FAIL, f"NVML sees {env.nvml_gpus} GPU(s) ({env.nvml_detail}) but {why}"
    torch = f"torch {env.torch_version}" if env.torch_version else "no torch in this python"
    return SKIP, f"no CUDA GPU here ({env.nvml_detail}; {torch}): every GPU path skipped"


def probe_environment() -> SmokeEnvironment:
    """NVML first (compute mode before anything touches CUDA), then torch in a child process."""
    nvml = probe_nvml()
    torch = probe_torch()
    return SmokeEnvironment(
        torch_version=torch.get("version"),
        torch_cuda=torch.get("cuda"),
        cuda_available=bool(torch.get("available")),
        cuda_error=torch.get("error"),
        gpus=torch.get("gpus") or [],
        nccl_version=torch.get("nccl"),
        flashinfer_version=installed_version("flashinfer-python"),
        missing_modules=missing_modules(),
        python=f"{sys.version.split()[0]} ({sys.executable})",
        nvml_py_version=nvml_py_version(),
        **nvml,
    )


def probe_nvml(nvml: Any = None) -> dict[str, Any]:
    """NVML's GPUs, SM, compute modes, driver, and every call it did not answer; `nvml`: a fake in tests."""
    found: dict[str, Any] = {"nvml_gpus": None, "nvml_names": [], "sm": [], "compute_modes": [], "nvml_unanswered": {}}
    try:
        nvml = nvml or importlib.import_module("pynvml")
    except ImportError:
        return {**found, "nvml_detail": "no NVML: nvidia-ml-py is not installed"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no usable driver
        return {**found, "nvml_detail": f"no NVIDIA driver (NVML: {exc})"}
    ask = NvmlCalls(nvml)
    try:
        driver = ask("nvmlSystemGetDriverVersion")
        cuda = ask("nvmlSystemGetCudaDriverVersion_v2") or ask("nvmlSystemGetCudaDriverVersion")
        count = ask("nvmlDeviceGetCount")
        for i in range(count or 0):
            handle = ask("nvmlDeviceGetHandleByIndex", i)
            name = ask("nvmlDeviceGetName", handle)
            cc = ask("nvmlDeviceGetCudaComputeCapability", handle)
            mode = ask("nvmlDeviceGetComputeMode", handle)
            found["nvml_names"].append(name.decode() if isinstance(name, bytes) else name)
            found["sm"].append(f"{cc[0]}.{cc[1]}" if cc else None)
            found["compute_modes"].append(COMPUTE_MODES.get(mode, str(mode)) if mode is not None else None)
    finally:
        ask("nvmlShutdown")
    driver = driver.decode() if isinstance(driver, bytes) else driver
    cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "?"
    found.update(nvml_gpus=count, nvml_unanswered=ask.unanswered)
    found["nvml_detail"] = f"driver {driver or '?'}, CUDA {cuda_text}"
    return found


def probe_torch() -> dict[str, Any]:
    """What torch says about CUDA, asked in a child process (this one keeps no CUDA context); {} without torch."""
    if importlib.util.find_spec("torch") is None:
        return {}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "commprof.gpu_smoke.environment"],
            capture_output=True,
            text=True,
            timeout=TORCH_PROBE_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"version": "?", "error": f"torch's CUDA probe gave no answer within {TORCH_PROBE_TIMEOUT_S} s"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"version": installed_version("torch") or "?", "error": f"torch's CUDA probe failed: {tail[:300]}"}


def torch_facts() -> dict[str, Any]:
    """torch's answer (run in the child): version, CUDA build, whether CUDA is usable and why not, devices."""
    import warnings

    import torch

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
    nccl = None
    if available:
        try:
            raw = torch.cuda.nccl.version()
            nccl = ".".join(map(str, raw)) if isinstance(raw, tuple) else str(raw)
        except (RuntimeError, AttributeError):
            nccl = None
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "available": available,
        "error": (error or None) and error.splitlines()[0][:500],
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else [],
        "nccl": nccl,
    }


def missing_modules() -> list[str]:
    """The modules the GPU paths import that this interpreter cannot find (without importing them)."""
    toml = "tomllib" if sys.version_info >= (3, 11) else "tomli"
    return [name for name in (*NEEDED_MODULES, toml) if importlib.util.find_spec(name) is None]


def _not_installed() -> str:
    """FlashInfer's absence with how to install it (that hint lives with the gates, which need click)."""
    try:
        from commprof.impls.gating import FLASHINFER_INSTALL
    except ImportError:
        return "not installed"
    return f"not installed ({FLASHINFER_INSTALL})"


if __name__ == "__main__":
    print(json.dumps(torch_facts()))
