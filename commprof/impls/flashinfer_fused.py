"""FlashInfer's fused all-reduce + residual add + RMSNorm (TRT-LLM kernels), one-shot or two-shot.

One `allreduce_fusion` call replaces the engine's all-reduce and the RMSNorm after it, so the sweep records
it against the `nccl+rmsnorm` reference, not the bare all-reduce. Ops with no RMSNorm after them (the
embedding's) run the same kernels with the plain kAllReduce pattern.

What is timed per op: the one kernel (it stages the input into the IPC workspace itself: no separate copy)
plus allocating its outputs (norm_out, residual_out, and the all-reduce output FlashInfer allocates), as
SGLang does; under a CUDA graph the allocations cost nothing. No PDL: launch_with_pdl=False with
trigger_completion_at_end=True, the safe pairing when the next kernel is not PDL-aware; its unfused reference
(`nccl+rmsnorm`) runs FlashInfer's RMSNorm with the same setting, so the comparison is like for like.
"""

from __future__ import annotations

from typing import Any, ClassVar

from commprof.errors import UsageError
from commprof.impls import gating
from commprof.impls.base import AllReduceImpl, ImplContext, Support

# Programmatic dependent launch, for this kernel and for the reference's RMSNorm kernel alike (FlashInfer's
# RMSNorm turns it on by default from SM90): one setting, recorded with every result.
LAUNCH_WITH_PDL = False


def workspace_kwargs(world_size: int, rank: int, max_token_num: int, hidden_dim: int, dtype, group) -> dict[str, Any]:
    """Arguments of flashinfer.comm.create_allreduce_fusion_workspace: always the TRT-LLM backend.

    backend="trtllm" explicitly: "auto" may pick MNNVL, which needs NVLink multicast and cannot be captured.
    """
    return {
        "backend": "trtllm",
        "world_size": world_size,
        "rank": rank,
        "max_token_num": max_token_num,
        "hidden_dim": hidden_dim,
        "dtype": dtype,
        "group": group,
    }


def allreduce_kwargs(x, workspace, pattern: int, use_oneshot: bool) -> dict[str, Any]:
    """Arguments of flashinfer.comm.allreduce_fusion for a plain all-reduce (pattern kAllReduce)."""
    return {
        "input": x,
        "workspace": workspace,
        "pattern": pattern,
        "launch_with_pdl": LAUNCH_WITH_PDL,
        "trigger_completion_at_end": True,
        "use_oneshot": use_oneshot,
    }


def fused_kwargs(
    x, workspace, pattern: int, use_oneshot: bool, residual, weight, eps: float, residual_out, norm_out
) -> dict[str, Any]:
    """Arguments of flashinfer.comm.allreduce_fusion for all-reduce + residual add + RMSNorm."""
    return {
        **allreduce_kwargs(x, workspace, pattern, use_oneshot),
        "residual_in": residual,
        "rms_gamma": weight,
        "rms_eps": eps,
        "residual_out": residual_out,
        "norm_out": norm_out,
    }


def _use_oneshot(options: dict) -> bool:
    try:
        return gating.bool_option(options, "use_oneshot", required=True)
    except ValueError as exc:
        raise UsageError(f"flashinfer-fused: {exc} (one-shot and two-shot are separate sweep points)") from None


class FlashInferFusedAllReduce(AllReduceImpl):
    """flashinfer.comm.allreduce_fusion on a backend="trtllm" workspace; options: use_oneshot (true/false)."""

    name: ClassVar[str] = "flashinfer-fused"
    fuses_rmsnorm: ClassVar[bool] = True
    capturable: ClassVar[bool] = True

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        unknown = gating.unknown_options(self.options, gating.FLASHINFER_FUSED_OPTIONS)
        if unknown:
            raise UsageError(f"flashinfer-fused: {unknown}")
        self.use_oneshot = _use_oneshot(self.options)
        self.workspace = None

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        return gating.flashinfer_fused_support(ctx)

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        return gating.flashinfer_fused_tokens(ctx, tokens)

    def setup(self, group, plan, device) -> None:
        import flashinfer.comm as comm
        import torch
        import torch.distributed as dist

        super().setup(group, plan, device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self._comm = comm
        self._torch = torch
        self._patterns = comm.AllReduceFusionPattern
        self.workspace = comm.create_allreduce_fusion_workspace(
            **workspace_kwargs(
                world_size=dist.get_world_size(group),
                rank=dist.get_rank(group),
                max_token_num=plan.tokens,
                hidden_dim=plan.model.hidden_size,
                dtype=getattr(torch, plan.model.dtype),
                group=group,
            )
        )

    def all_reduce(self, x):
        return self._comm.allreduce_fusion(
            **allreduce_kwargs(x, self.workspace, self._patterns.kAllReduce, self.use_oneshot)
        )

    def all_reduce_rmsnorm(self, x, residual, weight, eps: float):
        residual_out = self._torch.empty_like(residual)
        norm_out = self._torch.empty_like(x)
        self._comm.allreduce_fusion(
            **fused_kwargs(
                x,
                self.workspace,
                self._patterns.kARResidualRMSNorm,
                self.use_oneshot,
                residual,
                weight,
                eps,
                residual_out,
                norm_out,
            )
        )
        return norm_out, residual_out

    def detail(self) -> str:
        shot = "one-shot" if self.use_oneshot else "two-shot"
        return f"allreduce_fusion {shot} on a trtllm workspace, PDL {'on' if LAUNCH_WITH_PDL else 'off'}"

    def teardown(self) -> None:
        if self.workspace is not None:
            self.workspace.destroy()
            self.workspace = None
