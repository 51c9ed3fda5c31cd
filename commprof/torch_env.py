"""Variables libtorch reads once, when it loads: a per-point value of one cannot act in workers forked from a
server that loaded torch before the first point (commprof.replay.forkserver). Pure: the facts and the sentence."""

from __future__ import annotations

# Variables libtorch reads once, from static initializers when it loads: in the fork server, before any point,
# so every forked worker keeps the launch's value whatever the point sets. Each: what it sets, and where.
FROZEN_AT_TORCH_LOAD = {
    "TORCH_SYMMMEM": "torch symmetric memory's backend (a static initializer in "
    "torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemory.cu registers it)",
    "PYTORCH_CUDA_ALLOC_CONF": "the CUDA caching allocator's configuration (a static initializer in "
    "c10/cuda/CUDACachingAllocator.cpp parses it to pick the allocator)",
    "PYTORCH_ALLOC_CONF": "the caching allocator's configuration (read with PYTORCH_CUDA_ALLOC_CONF, when libtorch loads)",
}


def frozen_variable(name: str) -> str | None:
    """Why a per-point value of `name` would not act (it is a run-level setting), or None when it would."""
    what = FROZEN_AT_TORCH_LOAD.get(name)
    if what is None:
        return None
    return (
        f"{name} is read once, when libtorch loads: {what}. Every point's workers are forked from a server that "
        f"loaded torch before the first point, so a per-point value would not act; set it on the launch "
        f"instead ({name}=... torchrun ...)"
    )
