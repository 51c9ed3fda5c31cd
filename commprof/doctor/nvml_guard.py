"""The one way commprof asks NVML: a function this nvidia-ml-py lacks (an older release) or a read NVML refuses
(NVMLError: not supported, no permission, a VM that hides PCIe links) answers None and keeps its reason."""

from __future__ import annotations

from typing import Any

from commprof.versions import installed_version


class NvmlCalls:
    """Calls into one pynvml module (or a fake); `unanswered` maps each function that gave no answer to why."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        self.unanswered: dict[str, str] = {}

    def __call__(self, name: str, *args: Any) -> Any:
        """NVML's answer to `name(*args)`, or None with the reason kept under `name`."""
        function = getattr(self.nvml, name, None)
        if function is None:
            self.unanswered[name] = f"not in this nvidia-ml-py ({nvml_py_version() or 'version unknown'})"
            return None
        try:
            return function(*args)
        except Exception as exc:  # NVMLError_NotSupported / NoPermission / GpuIsLost / FunctionNotFound / ...
            self.unanswered[name] = f"{type(exc).__name__}: {exc}".strip()
            return None


def nvml_py_version() -> str | None:
    """The installed nvidia-ml-py's version (pynvml itself carries none), or None."""
    return installed_version("nvidia-ml-py")
