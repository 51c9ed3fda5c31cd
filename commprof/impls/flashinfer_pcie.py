"""FlashInfer's PCIe all-reduce over CUDA IPC (flashinfer.comm.PcieIpcAllReduceWorkspace), no fusion.

Built for boxes where every peer transfer crosses PCIe: the kernels stage their pushes so each rank has one
outbound and one inbound stream. Every method is a collective that must be issued identically on all ranks
(the kernels spin without a timeout), which the harness guarantees by running the same plan everywhere.

What is timed per op: one out-of-place kernel that reads the harness's input directly (the staging copy is
inside the kernel) plus allocating its output. The workspace is sized to the plan's largest all-reduce
exactly (oversizing spreads its double buffer and costs time at small T).

The tune cache is a file the workspace reads at construction and tune() writes (FlashInfer 0.7.4 pcie_ipc_ar.py:
PcieIpcAllReduceWorkspace(tune_cache=...), _init_tuning; its default is one file per world size, shared by every
process on the box): in a sweep it is the setting's own (`state_dir`), so an untuned point never runs what a tuned
one measured, and a tuned setting is tuned once, by the sweep's preparation, outside every point's time limit.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from commprof.impls.base import (
    AllReduceImpl,
    EngineFlag,
    EngineSwitch,
    ImplContext,
    OptionKind,
    SmokeCase,
    Support,
    TraceKernels,
    whole_names,
)
from commprof.impls.gating import (
    FLASHINFER,
    first_failure,
    needs_cuda,
    needs_dtype,
    needs_flashinfer,
    needs_p2p,
    needs_world_size,
)
from commprof.planner.models import DTYPE_BYTES

# flashinfer.comm.PcieIpcAllReduceWorkspace (pcie_ipc_ar.py, pcie_ipc_policy._admits; flashinfer PR #4393). The
# first release that ships it is 0.7.0: the PyPI wheels of 0.6.18 and 0.6.18.post1 have no pcie_ipc_ar.py, and
# 0.7.0's constructor, tune, prepare and all_reduce take what 0.7.4's do. Plain loads/stores over CUDA IPC: any SM.
PCIE_IPC_MIN_FLASHINFER = "0.7.0"
PCIE_IPC_WORLD_SIZES = (2, 4, 8)
PCIE_IPC_DTYPES = ("bfloat16", "float16")
PCIE_IPC_PACK_BYTES = 16
KERNEL = "FlashInfer's PCIe IPC all-reduce"
# Its kernels as FlashInfer 0.7.4 names them: the push kernels (data/include/flashinfer/comm/pcie_ipc_all_reduce.cuh)
# and those of the copy-engine variants tune() may pick (pcie_ipc_policy.IpcVariant.COPY_ENGINE_*:
# pcie_ipc_ce_ring.cuh, pcie_ipc_all_gather.cuh).
PCIE_IPC_KERNELS = (
    "push_oneshot_param_kernel",
    "ipc_tp2_remote_push_kernel",
    "ipc_rsag_push_param_kernel",
    "ipc_rsag_ring_push_param_kernel",
    "ipc_topo_rsag8_push_param_kernel",
    "ipc_topo_rsag8_ring_push_param_kernel",
    "ipc_topo_rsag8_block_param_kernel",
)
COPY_ENGINE_KERNELS = (
    "ce_add_kernel",
    "ce_copy_kernel",
    "ce_publish_flag_kernel",
    "ce_wait_flag_kernel",
    "copy_engine_retire_kernel",
    "copy_engine_pair_barrier_kernel",
    "kernel_pcie_ipc_ce_sm120_binary_wait_clear",  # pcie_ipc_ce_memop.cuh's wait-and-clear (extern "C", SM120)
)


def pcie_ipc_shape(ctx: ImplContext, tokens: int) -> str | None:
    """pcie_ipc_policy._admits: whole 16-byte packs, and at least one pack per rank."""
    pack = PCIE_IPC_PACK_BYTES // DTYPE_BYTES.get(ctx.dtype, 2)
    numel = tokens * ctx.hidden_size
    if numel % pack or numel < pack * ctx.world_size:
        return (
            f"{KERNEL} needs T x hidden to be a multiple of {pack} and at least "
            f"{pack * ctx.world_size} elements; T = {tokens} gives {numel}"
        )
    return None


TUNE_CACHE = "flashinfer-pcie-ipc-tune.json"  # in the setting's state_dir


def workspace_kwargs(group, max_numel: int, dtype, tune_cache: str | None = None) -> dict[str, Any]:
    """Arguments of PcieIpcAllReduceWorkspace(...): `tune_cache` None is FlashInfer's default file."""
    return {"group": group, "max_numel": max_numel, "dtype": dtype, "tune_cache": tune_cache}


def tune_args(hidden_size: int, dtype) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of PcieIpcAllReduceWorkspace.tune: measure launch configs for this hidden size."""
    return ([hidden_size],), {"dtype": dtype}


def prepare_args(shapes, dtype) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of PcieIpcAllReduceWorkspace.prepare: resolve every [T, H] before graph capture."""
    return ([(int(t), int(h)) for t, h in shapes],), {"dtype": dtype}


class FlashInferPcieIpcAllReduce(AllReduceImpl):
    """PcieIpcAllReduceWorkspace.all_reduce; option tune (true/false, default false) runs tune() once at setup."""

    name: ClassVar[str] = "flashinfer-pcie-ipc"
    library: ClassVar[str | None] = FLASHINFER
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = TraceKernels(
        "FlashInfer PCIe IPC all-reduce",
        whole_names(*PCIE_IPC_KERNELS, *COPY_ENGINE_KERNELS),
        "all_reduce",
        "FlashInfer 0.7.4 data/include/flashinfer/comm/pcie_ipc_all_reduce.cuh, pcie_ipc_ce_ring.cuh (tune()'s "
        "copy-engine variants), pcie_ipc_all_gather.cuh, pcie_ipc_ce_sm120.cuh",
    )
    # Each name was read in the engine's own source at the version named.
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = (
        EngineSwitch(
            "SGLang",
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1",
            "SGLANG_PCIE_IPC_MAX_NUMEL",
            "elements",
            "SGLang 0.5.23 with flashinfer-python >= 0.7.0 (sglang/srt/distributed/device_communicators/"
            "pcie_ipc_ar.py: eligible_group builds it for the tp group at world size 2 / 4 / 8 when "
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set; PcieIpcCommunicator.should_pcie_ipc_ar takes a contiguous bf16 "
            "all-reduce of at most max_numel elements, max_numel = SGLANG_PCIE_IPC_MAX_NUMEL, else the decode width x "
            "hidden; larger ones stay on NCCL)",
            before="quick all-reduce",
            released=("0.5.23",),
        ),
        EngineSwitch(
            "vLLM",
            "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1",
            None,
            "",
            "vLLM 0.33 / 0.34 with flashinfer-python >= 0.7.0 (vllm/distributed/device_communicators/"
            "flashinfer_pcie_ipc_all_reduce.py: FlashInferPcieIpcAllReduce, single node, world size 2 / 4 / 8; setup "
            "sizes the workspace to the largest CUDA-graph capture size x hidden and should_use takes every 2-D "
            "[tokens, hidden] all-reduce it holds in the model's dtype (bf16 / fp16): no size cap; off under "
            "VLLM_BATCH_INVARIANT)",
            before="FlashInfer all-reduce",
            released=("0.33", "0.34"),
        ),
    )
    smoke: ClassVar[SmokeCase | str] = SmokeCase("flashinfer-pcie-ipc")
    capturable: ClassVar[bool] = True
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {"tune": bool}

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self.tune: bool = self.options.get("tune", False)
        self.workspace = None
        self._stream = None

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        """PcieIpcAllReduceWorkspace: 2/4/8 ranks, 2-byte dtypes, P2P between all GPUs; any SM."""
        return first_failure(
            needs_cuda(ctx),
            needs_flashinfer(ctx, PCIE_IPC_MIN_FLASHINFER, "PcieIpcAllReduceWorkspace"),
            needs_world_size(ctx, PCIE_IPC_WORLD_SIZES, KERNEL),
            needs_dtype(ctx, PCIE_IPC_DTYPES, KERNEL),
            needs_p2p(ctx),
        )

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        return first_failure(pcie_ipc_shape(ctx, tokens))

    @classmethod
    def jit_builds(cls, backend: str, options: dict[str, Any]) -> tuple[str, ...]:
        # pcie_ipc_ar.get_pcie_ipc_comm_module builds it on first use
        return ("flashinfer.jit.comm:gen_pcie_ipc_comm_module",) if backend == "nccl" else ()

    @classmethod
    def preparation(cls, backend: str, options: dict[str, Any]) -> str | None:
        if backend == "nccl" and options.get("tune", False):
            return "tunes its launch configurations (PcieIpcAllReduceWorkspace.tune) into the setting's tune cache"
        return None

    def setup(self, group, plan, device) -> None:
        import torch
        from flashinfer.comm import PcieIpcAllReduceWorkspace

        super().setup(group, plan, device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self._torch = torch
        self._dtype = getattr(torch, plan.model.dtype)
        self.tune_cache = str(self.state_dir / TUNE_CACHE) if self.state_dir is not None else None
        # Read at construction: what the setting's preparation tuned, or nothing (seed configurations).
        self.tuned = bool(self.tune_cache and os.path.isfile(self.tune_cache))
        self.workspace = PcieIpcAllReduceWorkspace(
            **workspace_kwargs(group, plan.max_numel, self._dtype, self.tune_cache)
        )
        if self.tune and not self.tuned:
            # Must precede prepare(): tune() clears the resolved launch configurations.
            args, kwargs = tune_args(plan.model.hidden_size, self._dtype)
            self.workspace.tune(*args, **kwargs)
            self.tuned = True

    def prepare(self, shapes) -> None:
        """Resolves every shape's launch configuration (a collective) so none is first seen in a capture.

        Shapes the kernels do not admit resolve to None here and are refused per T by support_tokens.
        """
        args, kwargs = prepare_args(shapes, self._dtype)
        self.workspace.prepare(*args, **kwargs)

    def all_reduce(self, x):
        self._follow_stream()
        return self.workspace.all_reduce(x)

    def detail(self) -> str:
        where = self.tune_cache or "FlashInfer's default tune cache"
        configs = "tuned launch configurations" if self.tuned else "seed launch configurations (untuned)"
        return f"PcieIpcAllReduceWorkspace.all_reduce with {configs}, tune cache {where}"

    def _follow_stream(self) -> None:
        """The workspace serves one stream; when the caller moves to another, order it after the old one.

        Capture is exempt (it records on a side stream; nothing executes), so the binding stays put.
        """
        torch = self._torch
        if torch.cuda.is_current_stream_capturing():
            return
        stream = torch.cuda.current_stream()
        if self._stream is not None and stream != self._stream:
            stream.wait_stream(self._stream)
            self.workspace.rebind_stream()
        self._stream = stream

    def teardown(self) -> None:
        if self.workspace is not None:
            self.workspace.destroy()
            self.workspace = None
