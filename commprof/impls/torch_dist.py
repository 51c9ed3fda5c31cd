"""torch.distributed all-reduce (NCCL on GPUs, gloo on CPUs): the baseline, and its unfused RMSNorm reference."""

from __future__ import annotations

from typing import ClassVar

from commprof.impls.base import SUPPORTED, AllReduceImpl, ImplContext, OptionKind, Support, unsupported
from commprof.impls.context import installed_version
from commprof.impls.flashinfer_fused import LAUNCH_WITH_PDL
from commprof.impls.gating import FLASHINFER_INSTALL


class FlashInferNormBuild:
    """FlashInfer's fused_add_rmsnorm as a build (see AllReduceImpl.jit_builds): running it once on this GPU
    compiles its kernel, which FlashInfer otherwise does on first use."""

    name = "flashinfer_norm"

    def build_and_load(self) -> None:
        import torch
        from flashinfer import fused_add_rmsnorm

        for dtype in (torch.bfloat16, torch.float16):
            x = torch.ones(1, 128, dtype=dtype, device="cuda")
            fused_add_rmsnorm(x, x.clone(), x[0].clone(), 1e-6, enable_pdl=LAUNCH_WITH_PDL)
        torch.cuda.synchronize()


def rmsnorm_reference(x, residual, weight, eps: float):
    """residual-add + RMSNorm as the engine runs it unfused: returns (normed, new residual), in x's dtype."""
    import torch

    summed = x + residual
    var = summed.float().pow(2).mean(dim=-1, keepdim=True)
    normed = (summed.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight
    return normed, summed


class TorchAllReduce(AllReduceImpl):
    """dist.all_reduce on the process group's backend, in place."""

    name: ClassVar[str] = "torch"
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {}

    def all_reduce(self, x):
        import torch.distributed as dist

        dist.all_reduce(x, group=self.group)
        return x


class _BackendAllReduce(TorchAllReduce):
    """torch's all-reduce, gated to the one backend it names."""

    backend_title: ClassVar[str] = ""

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        if ctx.backend != cls.name:
            return unsupported(
                f"needs the {cls.backend_title} backend (this run uses {ctx.backend}"
                f"{': no CUDA GPUs' if ctx.backend == 'gloo' else ''})"
            )
        return SUPPORTED


class NcclAllReduce(_BackendAllReduce):
    name: ClassVar[str] = "nccl"
    backend_title: ClassVar[str] = "NCCL"
    runs_on_nccl: ClassVar[bool] = True


class GlooAllReduce(_BackendAllReduce):
    name: ClassVar[str] = "gloo"
    backend_title: ClassVar[str] = "gloo"
    capturable: ClassVar[bool] = False


class TorchAllReduceRmsnorm(TorchAllReduce):
    """The unfused reference for fused kinds: all-reduce, then residual add + RMSNorm, the same work.

    On CUDA it uses FlashInfer's fused_add_rmsnorm kernel when FlashInfer is importable (what an engine
    runs), with the fused kind's PDL setting, and torch ops otherwise; `options["norm"]` = "torch" forces
    torch ops.
    """

    name: ClassVar[str] = "nccl+rmsnorm"
    fuses_rmsnorm: ClassVar[bool] = True
    unfused_reference: ClassVar[bool] = True
    runs_on_nccl: ClassVar[bool] = True  # on the NCCL backend
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {"norm": ("flashinfer", "torch")}

    @classmethod
    def jit_builds(cls, backend: str, options: dict) -> tuple[str, ...]:
        """FlashInfer's RMSNorm, where setup() will use it: on CUDA, with FlashInfer installed."""
        wanted = backend == "nccl" and options.get("norm", "flashinfer") == "flashinfer"
        return (
            ("commprof.impls.torch_dist:FlashInferNormBuild",)
            if wanted and installed_version("flashinfer-python")
            else ()
        )

    def setup(self, group, plan, device) -> None:
        super().setup(group, plan, device)
        self._fused_add_rmsnorm = None
        self._why_torch = "" if device.type == "cuda" else " (CPU ranks)"
        if self.options.get("norm", "flashinfer") != "flashinfer":
            self._why_torch = ' (option norm = "torch")'
        elif device.type == "cuda":
            try:
                from flashinfer import fused_add_rmsnorm
            except ImportError:
                self._why_torch = f" (FlashInfer is not installed: {FLASHINFER_INSTALL})"
            else:
                self._fused_add_rmsnorm = fused_add_rmsnorm

    def detail(self) -> str:
        if self._fused_add_rmsnorm is not None:
            norm = f"flashinfer.fused_add_rmsnorm, PDL {'on' if LAUNCH_WITH_PDL else 'off'}"
        else:
            norm = "torch ops" + self._why_torch
        return f"all-reduce, then residual add + RMSNorm with {norm}"

    def all_reduce_rmsnorm(self, x, residual, weight, eps: float):
        self.all_reduce(x)
        if self._fused_add_rmsnorm is not None:
            # In place: residual += x, then x = rmsnorm(residual) * weight.
            self._fused_add_rmsnorm(x, residual, weight, eps, enable_pdl=LAUNCH_WITH_PDL)
            return x, residual
        return rmsnorm_reference(x, residual, weight, eps)
