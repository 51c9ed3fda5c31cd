"""torch.distributed all-reduce (NCCL on GPUs, gloo on CPUs): the baseline, and its unfused RMSNorm reference."""

from __future__ import annotations

from typing import ClassVar

from commprof.impls.base import (
    SUPPORTED,
    AllReduceImpl,
    EngineFlag,
    EngineSwitch,
    ImplContext,
    OptionKind,
    SmokeCase,
    Support,
    TraceKernels,
    unsupported,
)
from commprof.impls.flashinfer_fused import LAUNCH_WITH_PDL
from commprof.impls.gating import FLASHINFER_INSTALL
from commprof.versions import installed_version


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
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = TraceKernels(
        "NCCL",
        r"^(void )?(ncclDevKernel|ncclKernel|ncclSymkDevKernel)_",
        "from the name",
        "NCCL 2.27-2.30 src/device/generate.py (ncclDevKernel_<Coll>_<Op>_<type>_<ALGO>_<PROTO>; ncclKernel_ "
        "before 2.19) and src/device/symmetric/generate.py (ncclSymkDevKernel_, symmetric kernels)",
    )
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()  # the engines' default: nothing to switch
    smoke: ClassVar[SmokeCase | str] = "the smoke's baseline (point p000), judged on its own"
    backend_title: ClassVar[str] = "NCCL"
    runs_on_nccl: ClassVar[bool] = True


class GlooAllReduce(_BackendAllReduce):
    name: ClassVar[str] = "gloo"
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = "runs on CPU ranks: no GPU kernel"
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()  # no engine serves on gloo
    smoke: ClassVar[SmokeCase | str] = "the smoke runs on GPUs, where the baseline is NCCL's"
    backend_title: ClassVar[str] = "gloo"
    capturable: ClassVar[bool] = False


class TorchAllReduceRmsnorm(TorchAllReduce):
    """The unfused reference for fused kinds: all-reduce, then residual add + RMSNorm, the same work.

    On CUDA it uses FlashInfer's fused_add_rmsnorm kernel when FlashInfer is importable (what an engine
    runs), with the fused kind's PDL setting, and torch ops otherwise; `options["norm"]` = "torch" forces
    torch ops.
    """

    name: ClassVar[str] = "nccl+rmsnorm"
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = "nccl"  # NCCL's all-reduce, then the norm's own kernels
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()  # what engines run without fusion
    smoke: ClassVar[SmokeCase | str] = SmokeCase(
        "nccl+rmsnorm", gated_ok=False, title="nccl+rmsnorm, the unfused reference"
    )
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
