"""The collectives in one rank's trace events, one row each: kind, sizes, when it was issued and when it ran.

Three ways a Kineto trace records a collective, all read here (pure, over `Trace.events`):
- NCCL kernels with the "Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size"
  arguments recent PyTorch attaches to them;
- older NCCL kernels without them: the kind from the kernel name, the sizes from the "nccl:<collective>"
  annotation around the kernel's launch ("Input Dims", "Input type"), found through the launch's correlation id;
- gloo (CPU ranks): the c10d CPU op on the calling thread (recorded shapes), its execution the matching
  "gloo:<collective>" annotation on gloo's worker thread.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from commprof.trace.events import Trace
from commprof.units import bounded_bytes

COLUMNS = [
    "rank",
    "kind",
    "name",
    "issued",  # host time the op was issued (kernel launch, c10d call): what assigns it to a step
    "ts",  # when it ran (GPU kernel, gloo worker), µs
    "dur",
    "bytes_in",  # what one rank contributes
    "bytes_out",  # what one rank receives
    "dtype",
    "group_size",
    "source",
]

NCCL_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
# Normalised spelling (letters only, lower case) -> kind; longest names first so "reducescatter" is not "reduce".
_KINDS = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
# Element sizes in the spellings traces use: ScalarType names ("Float", "BFloat16"), "c10::BFloat16", C names.
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "signedchar": 1,
    "int8": 1,
    "byte": 1,
    "unsignedchar": 1,
    "uint8": 1,
    "bool": 1,
    "float8e4m3fn": 1,
    "float8e5m2": 1,
}


def kind_of(text: str | None) -> str | None:
    """ "c10d::_allgather_base_", "gloo:all_reduce", "nccl:all_to_all", "allreduce", "AllReduce" -> the kind."""
    if not text:
        return None
    key = re.sub(r"[^a-z]", "", text.split("::")[-1].split(":")[-1].lower())
    return next((kind for prefix, kind in _KINDS if key.startswith(prefix)), None)


def dtype_bytes(dtype: str | None) -> int | None:
    if not dtype:
        return None
    return _DTYPE_BYTES.get(re.sub(r"[^a-z0-9]", "", str(dtype).lower().removeprefix("c10::")))


def numel(dims: Any) -> int | None:
    """Elements of a shape ([4, 7168]) or of a list of shapes ([[4, 7168], [4, 7168]])."""
    if not isinstance(dims, list):
        return None
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims) if dims else None
    parts = [numel(d) for d in dims]
    return sum(p for p in parts if p) or None


def find_collectives(trace: Trace) -> pd.DataFrame:
    """Every collective of the trace, in issue order; NCCL kernels where the trace has any, else c10d CPU ops."""
    ev = trace.events
    kernels = ev[(ev["cat"] == "kernel") & ev["name"].astype(str).str.startswith(NCCL_KERNEL_PREFIXES)]
    rows = _nccl_rows(ev, kernels, trace) if len(kernels) else _cpu_rows(ev, trace)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values("issued", kind="stable", ignore_index=True)


def _launches(ev: pd.DataFrame) -> dict[Any, tuple[Any, float]]:
    """correlation id -> (host thread, time) of the CUDA runtime call that launched it."""
    runtime = ev[ev["cat"] == "cuda_runtime"]
    out = {}
    for tid, ts, args in zip(runtime["tid"], runtime["ts"], runtime["args"]):
        if "correlation" in args:
            out[args["correlation"]] = (tid, ts)
    return out


def _enclosing(annotations: pd.DataFrame, tid: Any, ts: float) -> dict[str, Any] | None:
    """The innermost "nccl:*" annotation on thread `tid` that spans time `ts`."""
    around = annotations[(annotations["tid"] == tid) & (annotations["ts"] <= ts) & (annotations["end"] >= ts)]
    return None if around.empty else around.iloc[-1].to_dict()


def _nccl_rows(ev: pd.DataFrame, kernels: pd.DataFrame, trace: Trace) -> list[dict[str, Any]]:
    launches = _launches(ev)
    annotations = ev[(ev["cat"] == "user_annotation") & ev["name"].astype(str).str.startswith("nccl:")].copy()
    annotations["end"] = annotations["ts"] + annotations["dur"]
    rows = []
    for kernel in kernels.itertuples(index=False):
        args = kernel.args
        tid, issued = launches.get(args.get("correlation"), (None, kernel.ts))
        if "Collective name" in args:
            kind, dtype = kind_of(args["Collective name"]), args.get("dtype")
            n_in, n_out, group = args.get("In msg nelems"), args.get("Out msg nelems"), args.get("Group size")
        else:
            note = _enclosing(annotations, tid, issued) if tid is not None else None
            note_args = (note or {}).get("args") or {}
            # The annotation names the API call (all_to_all runs as SendRecv kernels); else the kernel name.
            kind = kind_of((note or {}).get("name")) or kind_of(
                kernel.name.split("(")[0].split("_", 1)[-1].split("_")[0]
            )
            dtype = (note_args.get("Input type") or [None])[0]
            n_in = numel(note_args.get("Input Dims"))
            n_out = n_in * (trace.world_size or 1) if n_in and kind == "all_gather" else n_in
            group = trace.world_size
        size = dtype_bytes(dtype)
        rows.append(
            {
                "rank": trace.rank,
                "kind": kind or "unknown",
                "name": kernel.name.split("(")[0],
                "issued": issued,
                "ts": kernel.ts,
                "dur": kernel.dur,
                "bytes_in": bounded_bytes(n_in, size) if n_in and size else None,
                "bytes_out": bounded_bytes(n_out, size) if n_out and size else None,
                "dtype": dtype,
                "group_size": group,
                "source": "nccl kernel",
            }
        )
    return rows


def _cpu_rows(ev: pd.DataFrame, trace: Trace) -> list[dict[str, Any]]:
    """c10d ops (gloo) with their shapes; timing from gloo's worker-thread annotation of the same kind, in order."""
    names = ev["name"].astype(str)
    calls = ev[(ev["cat"] == "cpu_op") & names.str.startswith("c10d::")]
    work = ev[(ev["cat"] == "user_annotation") & names.str.startswith("gloo:")]
    queues: dict[str, list] = {}
    for row in work.itertuples(index=False):
        queues.setdefault(kind_of(row.name), []).append(row)
    rows = []
    for call in calls.itertuples(index=False):
        kind = kind_of(call.name)
        if kind is None:
            continue
        queue = queues.get(kind) or []
        done = queue.pop(0) if queue else None
        dims = call.args.get("Input Dims") or []
        # all-gather / reduce-scatter into one tensor: (output, input); the others: the tensors first.
        out_dims, in_dims = (
            (dims[0], dims[1]) if ("base" in call.name or "into_tensor" in call.name) else (dims[:1],) * 2
        )
        dtype = ((done.args.get("Input type") if done is not None else None) or [None])[0]
        size = dtype_bytes(dtype)
        n_in, n_out = numel(in_dims), numel(out_dims)
        rows.append(
            {
                "rank": trace.rank,
                "kind": kind,
                "name": call.name,
                "issued": call.ts,
                "ts": done.ts if done is not None else call.ts,
                "dur": done.dur if done is not None else call.dur,
                "bytes_in": bounded_bytes(n_in, size) if n_in and size else None,
                "bytes_out": bounded_bytes(n_out, size) if n_out and size else None,
                "dtype": dtype,
                "group_size": trace.world_size,
                "source": "gloo worker" if done is not None else "c10d call",
            }
        )
    return rows
