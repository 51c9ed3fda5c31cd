"""Which implementation ran each communication kernel of a trace: one table of kernel names, each read from its
library's source (the file named beside it), and the engine's communication kernels found with it. Pure.

NCCL Inspector sees only NCCL; an engine that was told to use FlashInfer's PCIe kernels, b12x or its own custom
all-reduce but still runs NCCL shows it here, in the kernels its step launched. Names are matched as whole
identifiers in the demangled kernel name, so namespaces and template arguments do not matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.trace.collectives import dtype_bytes, kind_of, numel
from commprof.trace.events import Trace


@dataclass(frozen=True)
class KernelName:
    """Kernel names of one implementation: the pattern, what it reduces and where the names come from."""

    implementation: str  # commprof's name for it (commprof.impls.registry), or the engine's where commprof has none
    label: str  # for people
    pattern: str  # regex over the demangled kernel name
    collective: str  # "all_reduce", "all_reduce+rmsnorm"; NCCL's: from the name
    source: str  # library, version and file the names are read from


def _names(*names: str) -> str:
    """Whole identifiers: `one_shot_all_reduce_kernel` does not match `multimem_one_shot_all_reduce_kernel`."""
    return r"(?<![A-Za-z0-9_])(" + "|".join(names) + r")(?![A-Za-z0-9_])"


KERNEL_NAMES: tuple[KernelName, ...] = (
    KernelName(
        "nccl",
        "NCCL",
        r"^(void )?(ncclDevKernel|ncclKernel|ncclSymkDevKernel)_",
        "from the name",
        "NCCL 2.27-2.30 src/device/generate.py (ncclDevKernel_<Coll>_<Op>_<type>_<ALGO>_<PROTO>; ncclKernel_ "
        "before 2.19) and src/device/symmetric/generate.py (ncclSymkDevKernel_, symmetric kernels)",
    ),
    KernelName(
        "flashinfer-pcie-ipc",
        "FlashInfer PCIe IPC all-reduce",
        _names(
            "push_oneshot_param_kernel",
            "ipc_tp2_remote_push_kernel",
            "ipc_rsag_push_param_kernel",
            "ipc_rsag_ring_push_param_kernel",
            "ipc_topo_rsag8_push_param_kernel",
            "ipc_topo_rsag8_ring_push_param_kernel",
            "ipc_topo_rsag8_block_param_kernel",
        ),
        "all_reduce",
        "FlashInfer 0.7.2 data/include/flashinfer/comm/pcie_ipc_all_reduce.cuh",
    ),
    KernelName(
        "flashinfer-fused",
        "FlashInfer TRT-LLM all-reduce fusion",
        _names(
            "allreduce_fusion_kernel_oneshot_lamport",
            "allreduce_fusion_kernel_twoshot_sync",
            "oneShotAllReduceKernel",
            "one_shot_all_reduce_norm_kernel",
            "lamport_style_one_shot_all_reduce_norm_kernel",
            "one_shot_prenorm_all_reduce_norm_kernel",
        ),
        "all_reduce+rmsnorm",
        "FlashInfer 0.7.2 data/include/flashinfer/comm/trtllm_allreduce_fusion.cuh and trtllm_allreduce.cuh",
    ),
    KernelName(
        "custom-ar",
        "vLLM / SGLang custom all-reduce (also FlashInfer's vllm_all_reduce)",
        _names("cross_device_reduce_1stage", "cross_device_reduce_2stage"),
        "all_reduce",
        "vLLM 0.33 csrc/custom_all_reduce.cuh (in vllm/_C_stable_libtorch.abi3.so); FlashInfer 0.7.2 "
        "data/include/flashinfer/comm/vllm_custom_all_reduce.cuh; SGLang 0.5.23 sgl_kernel.allreduce",
    ),
    KernelName(
        "custom-ar",
        "SGLang custom all-reduce v2",
        _names(
            "all_reduce_1shot_push_kernel",
            "all_reduce_2shot_push_kernel",
            "all_reduce_1shot_pull_kernel",
            "all_reduce_2shot_pull_kernel",
        ),
        "all_reduce",
        "SGLang 0.5.23 sglang/kernels/jit/csrc/distributed/custom_all_reduce.cuh",
    ),
    KernelName(
        "symm-mem",
        "torch symmetric memory",
        _names(
            "one_shot_all_reduce_kernel",
            "two_shot_all_reduce_kernel",
            "multimem_all_reduce_kernel",
            "multimem_one_shot_all_reduce_kernel",
        ),
        "all_reduce",
        "PyTorch 2.11 torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu",
    ),
    KernelName(
        "b12x",
        "b12x PCIe all-reduce",
        # The CuTe DSL names a kernel "kernel_" + "cutlass_" + the function's name + each non-IR argument as
        # text with ".<>" dropped, so a method's `self` gives "..._oneshot_cute_OneshotLaunch_object_at_...".
        r"^kernel_cutlass_kernel_b12xcommpcie.*(_OneshotLaunch|_FusedOneshotLaunch|_TwoShotLaunch"
        r"|_TwoShotBf16Launch|_TwoShotPullAllReduceLaunch|_HierarchicalLaunch|_IslandRSLaunch"
        # The DMA all-reduce moves data with copy engines; these are its flag and reduction kernels.
        r"|_dma_kernels_(Add|Flag|Quant|DequantAccum|DequantAccum9|DequantAddQuant|DequantStore)Launch)_object_at_",
        "all_reduce",
        "b12x 1.5.1 b12x/comm/pcie/_oneshot_cute.py, _twoshot_cute.py, _twoshot_bf16_cute.py, "
        "_hierarchical_cute.py, _island_rs_cute.py, _dma_kernels.py (the @cute.kernel method `kernel` of each "
        "*Launch class); "
        "the name's form: nvidia-cutlass-dsl 4.8.0 (b12x's pin) base_dsl/dsl.py kernel_launcher and mangle_name, "
        "cutlass_dsl/cutlass.py mangle_name",
    ),
)
# An answer's implementation -> the kernel table's name for what runs (the fused b12x kernels are b12x's).
RUNS_AS = {"default": "nccl", "nccl+rmsnorm": "nccl", "b12x-fused": "b12x"}
_COMPILED = [(k, re.compile(k.pattern)) for k in KERNEL_NAMES]


def identify(name: str) -> KernelName | None:
    """The table's entry for a kernel name, or None: not a communication kernel commprof knows."""
    return next((k for k, pattern in _COMPILED if pattern.search(name)), None)


def _nccl_kind(name: str) -> str:
    """ "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)" -> "all_reduce"."""
    body = re.sub(r"^(void )?\w+?Kernel_", "", name.split("(")[0])
    return kind_of(body.split("_")[0]) or "unknown"


def engaged_kernels(trace: Trace) -> pd.DataFrame:
    """Every communication kernel of one rank's trace: implementation, kind, bytes (from NCCL's kernel arguments,
    else the CPU op that launched it), start and duration; in launch order."""
    ev = trace.events
    kernels = ev[ev["cat"] == "kernel"]
    launches = {}
    for tid, ts, args in zip(*(ev.loc[ev["cat"] == "cuda_runtime", c] for c in ("tid", "ts", "args"))):
        if isinstance(args, dict) and "correlation" in args:
            launches[args["correlation"]] = (tid, ts)
    # The c10d op's own shapes may be a TensorList ([] dims); its "nccl:all_reduce" annotation holds the tensor's.
    ops = ev[
        ev["cat"].isin(("cpu_op", "user_annotation"))
        & ev["args"].map(lambda a: isinstance(a, dict) and "Input Dims" in a)
    ].sort_values("ts", kind="stable")
    known = {name: identify(name) for name in kernels["name"].astype(str).unique()}  # a trace repeats few names
    rows = []
    for kernel in kernels.itertuples(index=False):
        found = known[str(kernel.name)]
        if found is None:
            continue
        args = kernel.args if isinstance(kernel.args, dict) else {}
        kind = _nccl_kind(str(kernel.name)) if found.implementation == "nccl" else found.collective
        nbytes = None
        if "In msg nelems" in args and dtype_bytes(args.get("dtype")):
            nbytes = int(args["In msg nelems"]) * dtype_bytes(args.get("dtype"))
        elif args.get("correlation") in launches:
            tid, at = launches[args["correlation"]]
            around = ops[(ops["tid"] == tid) & (ops["ts"] <= at) & (ops["ts"] + ops["dur"] >= at)]
            for op_args in reversed(around["args"].tolist()):  # the innermost op that knows its tensor's size
                count, size = numel(op_args.get("Input Dims")), dtype_bytes((op_args.get("Input type") or [None])[0])
                if count and size:
                    nbytes = count * size
                    break
        rows.append(
            {
                "implementation": found.implementation,
                "label": found.label,
                "kind": kind,
                "bytes": nbytes,
                "name": str(kernel.name).split("(")[0],
                "ts": kernel.ts,
                "dur": kernel.dur,
                "source": found.source,
            }
        )
    return pd.DataFrame(rows, columns=["implementation", "label", "kind", "bytes", "name", "ts", "dur", "source"])


def kernel_groups(engaged: pd.DataFrame) -> list[dict[str, Any]]:
    """Per op group (kind and size), how many of its kernels each implementation ran."""
    if engaged.empty:
        return []
    frame = engaged.assign(bytes=engaged["bytes"].fillna(-1).astype(int))
    out = []
    for (kind, nbytes), members in frame.groupby(["kind", "bytes"], sort=True):
        counts = members.groupby("implementation").size().sort_values(ascending=False)
        out.append(
            {
                "kind": kind,
                "bytes": None if nbytes < 0 else int(nbytes),
                "count": int(len(members)),
                "implementations": {str(k): int(v) for k, v in counts.items()},
                "kernels": sorted(members["name"].unique().tolist())[:4],
            }
        )
    return out
