"""What makes each serving engine run a PCIe all-reduce kernel instead of NCCL, and bound the sizes it takes:
read by the routing export and the engine flags alike, built from what each implementation's module declares
(commprof.impls.registry)."""

from __future__ import annotations

from commprof.impls.base import EngineSwitch
from commprof.impls.registry import builtin_classes

# vLLM's default largest CUDA-graph capture size (vllm/config/compilation.py, CompilationConfig:
# max_cudagraph_capture_size "capped at 512 by default"): FlashInfer PCIe IPC takes every size up to it x hidden.
VLLM_PCIE_IPC_DEFAULT_CAPTURE = 512


def routing_variables() -> dict[str, tuple[EngineSwitch, ...]]:
    """Per built-in implementation an engine can be switched to: each engine's switch, the variable bounding
    the sizes it takes and the version it was read in, as the implementation's module declares them."""
    return {name: cls.engine_switches for name, cls in builtin_classes().items() if cls.engine_switches}
