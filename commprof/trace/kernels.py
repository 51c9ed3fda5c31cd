"""Which implementation ran each communication kernel of a trace: one table of kernel names, each read from its
library's source (the file named beside it), built from what each built-in's module declares plus the engines'
own kernels, and the engine's communication kernels found with it. Pure.

NCCL Inspector sees only NCCL; an engine that was told to use FlashInfer's PCIe kernels, b12x or its own custom
all-reduce but still runs NCCL shows it here, in the kernels its step launched. Names are matched as whole
identifiers in the demangled kernel name, so namespaces and template arguments do not matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.impls.base import whole_names
from commprof.impls.registry import runs_as_table, trace_kernel_table
from commprof.trace.collectives import dtype_bytes, kind_of, numel
from commprof.trace.events import Trace
from commprof.units import bounded_bytes


@dataclass(frozen=True)
class KernelName:
    """Kernel names of one implementation: the pattern, what it reduces and where the names come from."""

    implementation: str  # commprof's name for it (commprof.impls.registry), or the engine's where commprof has none
    label: str  # for people
    pattern: str  # regex over the demangled kernel name
    collective: str  # "all_reduce", "all_reduce+rmsnorm"; NCCL's: from the name
    source: str  # library, version and file the names are read from


# Communication kernels of the engines' own, which no commprof implementation runs (the built-ins' are declared
# in their modules: commprof.impls.registry).
ENGINE_KERNELS: tuple[KernelName, ...] = (
    KernelName(
        "custom-ar",
        "vLLM / SGLang custom all-reduce (also FlashInfer's vllm_all_reduce)",
        whole_names("cross_device_reduce_1stage", "cross_device_reduce_2stage"),
        "all_reduce",
        "vLLM 0.33 csrc/custom_all_reduce.cuh (in vllm/_C_stable_libtorch.abi3.so); FlashInfer 0.7.2 "
        "data/include/flashinfer/comm/vllm_custom_all_reduce.cuh; SGLang 0.5.23 sgl_kernel.allreduce",
    ),
    KernelName(
        "custom-ar",
        "SGLang custom all-reduce v2",
        whole_names(
            "all_reduce_1shot_push_kernel",
            "all_reduce_2shot_push_kernel",
            "all_reduce_1shot_pull_kernel",
            "all_reduce_2shot_pull_kernel",
        ),
        "all_reduce",
        "SGLang 0.5.23 sglang/kernels/jit/csrc/distributed/custom_all_reduce.cuh",
    ),
)


def kernel_names() -> tuple[KernelName, ...]:
    """Every kernel name the matcher knows: each built-in's own (the registry's trace_kernel_table), then the
    engines'. Read per trace, so an implementation added to the registry is matched at once."""
    own = tuple(
        KernelName(name, k.label, k.pattern, k.collective, k.source) for name, k in trace_kernel_table().items()
    )
    return own + ENGINE_KERNELS


def runs_as() -> dict[str, str]:
    """An answer's implementation -> the kernel table's name for what runs ("default" is NCCL's; the fused b12x
    kernels are b12x's), as each built-in's module says."""
    return runs_as_table()


def identify(name: str, table: tuple[KernelName, ...] | None = None) -> KernelName | None:
    """The table's entry for a kernel name, or None: not a communication kernel commprof knows."""
    return next((k for k in (table or kernel_names()) if re.search(k.pattern, name)), None)


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
    table = kernel_names()
    known = {name: identify(name, table) for name in kernels["name"].astype(str).unique()}  # a trace repeats few
    rows = []
    for kernel in kernels.itertuples(index=False):
        found = known[str(kernel.name)]
        if found is None:
            continue
        args = kernel.args if isinstance(kernel.args, dict) else {}
        kind = _nccl_kind(str(kernel.name)) if found.implementation == "nccl" else found.collective
        nbytes = None
        if "In msg nelems" in args and dtype_bytes(args.get("dtype")):
            nbytes = bounded_bytes(args["In msg nelems"], dtype_bytes(args.get("dtype")))
        elif args.get("correlation") in launches:
            tid, at = launches[args["correlation"]]
            around = ops[(ops["tid"] == tid) & (ops["ts"] <= at) & (ops["ts"] + ops["dur"] >= at)]
            for op_args in reversed(around["args"].tolist()):  # the innermost op that knows its tensor's size
                count, size = numel(op_args.get("Input Dims")), dtype_bytes((op_args.get("Input type") or [None])[0])
                if count and size:
                    nbytes = bounded_bytes(count, size)
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
